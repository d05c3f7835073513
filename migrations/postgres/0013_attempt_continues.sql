-- An attempt that continues a stream cut in another attempt of its job (a
-- route's continue_cut_streams) names that attempt, which came before it.
ALTER TABLE attempts ADD COLUMN continues INTEGER,
    ADD CONSTRAINT attempts_continues_an_earlier_one CHECK (continues < number);
