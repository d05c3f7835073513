-- An attempt that continues a stream cut in another attempt of its job (a
-- route's continue_cut_streams) names that attempt, which came before it.
ALTER TABLE attempts ADD COLUMN continues INTEGER CHECK (continues IS NULL OR continues < number);
