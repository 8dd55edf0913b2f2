-- Each invocation's id (core::model::InvocationSummary::invocation): the value of
-- the Fanout-Invocation header on its items' outbound calls and of `invocation`
-- in its log lines and its children's. Drawn when the invocation starts, so it is
-- known before the summary row (and its autoincrement id) exists. Rows stored
-- before keep NULL; nothing is rewritten. Not indexed: GET /invocations lists by
-- id, and an index would add a row written per invocation.
ALTER TABLE invocations ADD COLUMN invocation TEXT;
