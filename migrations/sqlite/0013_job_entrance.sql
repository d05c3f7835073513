-- The door a job's request came through (`jobs`, `chat-completions`,
-- `responses`, `messages`, `embeddings`): for the people who read the job.
-- Not part of its intent (a chat completion and a jobs API request of the
-- same key and body are one job; the first door is the one kept), and it
-- never changes. NULL: a job made before the door was recorded. Side by
-- side with migrations/postgres/0011_job_entrance.sql.
ALTER TABLE jobs ADD COLUMN entered_through TEXT
    CHECK (entered_through IS NULL OR entered_through = 'jobs' OR entered_through = 'chat-completions'
           OR entered_through = 'responses' OR entered_through = 'messages' OR entered_through = 'embeddings');

CREATE TRIGGER jobs_entrance_immutable BEFORE UPDATE OF entered_through ON jobs
WHEN NEW.entered_through IS NOT OLD.entered_through
BEGIN
    SELECT RAISE(ABORT, 'a job''s entrance is immutable');
END;
