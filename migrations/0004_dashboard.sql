-- Dashboard and /metrics (issue 12): what the batch timeline, rate, ETA and the
-- metrics scrape read, without a single extra write per item.

-- Each invocation's items that ended, per batch: {"<batch id>": {"completed": n,
-- "failed": n}} (core::model::Tally::per_batch). Summed over the invocations of a
-- batch's life it is the batch's throughput over time. Written with the summary
-- row, once per invocation.
ALTER TABLE invocations ADD COLUMN per_batch TEXT NOT NULL DEFAULT '{}';

-- The timeline, the rate (last minutes) and the metrics (last hour) read a range
-- of invocations by start time instead of the whole table. One more written row
-- per invocation, none per item.
CREATE INDEX invocations_started ON invocations (started_at);

-- Metrics sum the counters of running batches without reading finished ones.
-- Partial: a batch enters it at creation and leaves it when finished; the
-- per-item counter updates (cron_queue_count_terminal) do not touch it.
CREATE INDEX batches_running ON batches (status) WHERE status = 'running';
