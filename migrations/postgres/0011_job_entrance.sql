-- The door a job's request came through (`jobs`, `chat-completions`,
-- `responses`, `messages`, `embeddings`): for the people who read the job.
-- Not part of its intent (a chat completion and a jobs API request of the
-- same key and body are one job; the first door is the one kept), and it
-- never changes. NULL: a job made before the door was recorded. Side by
-- side with migrations/sqlite/0013_job_entrance.sql.
ALTER TABLE jobs ADD COLUMN entered_through TEXT
    CHECK (entered_through IN ('jobs', 'chat-completions', 'responses', 'messages', 'embeddings'));

CREATE FUNCTION jobs_entrance_immutable() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'a job''s entrance is immutable' USING ERRCODE = 'check_violation';
END;
$$;

CREATE TRIGGER jobs_entrance_immutable BEFORE UPDATE OF entered_through ON jobs
FOR EACH ROW WHEN (NEW.entered_through IS DISTINCT FROM OLD.entered_through)
EXECUTE FUNCTION jobs_entrance_immutable();
