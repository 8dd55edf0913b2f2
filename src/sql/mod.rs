//! Every SQL statement the Worker runs, one per file, pulled in at compile time so
//! the D1 store and the SQLite conformance tests run the very same text. The store
//! binds each statement's parameters through its typed struct (`params`).

mod params;
pub use params::*;

macro_rules! sql {
    ($($name:ident => $($file:literal)+),* $(,)?) => {
        $(pub const $name: &str = concat!($(include_str!($file)),+);)*

        /// Every statement by name, for the test of `params`.
        #[cfg(test)]
        const ALL: &[(&str, &str)] = &[$((stringify!($name), $name)),*];
    };
}

sql! {
    CREATE_BATCH => "create_batch.sql",
    MARK_FILL_PAGE => "mark_fill_page.sql",
    FILL_GROUP_PAGE => "fill_group_page.sql",
    FILL_EVERY_GROUP_PAGE => "fill_every_group_page.sql",
    ADVANCE_FILL => "advance_fill.sql",
    TICK_WORK => "tick_work.sql",
    ENQUEUE_ITEMS => "enqueue_items.sql",
    SET_BATCH_TOTAL => "set_batch_total.sql",
    GET_BATCH => "get_batch.sql",
    BATCH_EXISTS => "batch_exists.sql",
    GET_BATCH_BY_KEY => "get_batch_by_key.sql",
    LIST_BATCHES => "list_batches.sql",
    // A claim's statements share its selection (its WITH clause), so the hold,
    // the charge and the claim of one claim select the very same items.
    CLAIM_HELD => "claim_selection.sql" "key_rules.sql" "key_state.sql" "claim_room.sql" "claim_held.sql",
    CHARGE_RATE_LIMITS => "claim_selection.sql" "key_rules.sql" "key_state.sql" "claim_room.sql" "charge_rate_limits.sql",
    // Without the charge no item starts ahead: the plain claim reads no slots.
    CLAIM_DUE_ITEMS => "claim_selection.sql" "key_rules.sql" "key_state.sql" "claim_room.sql" "claim_now.sql" "claim_due_items.sql",
    CLAIM_DUE_ITEMS_AT_SLOTS => "claim_selection.sql" "key_rules.sql" "key_state.sql" "claim_room.sql" "claim_at_slots.sql" "claim_due_items.sql",
    // While nothing is in force: the selection without keys or limit tables.
    CLAIM_PLAIN => "claim_plain_selection.sql" "claim_now.sql" "claim_due_items.sql",
    COUNT_COMMITTED_OUTCOMES => "count_committed_outcomes.sql",
    COMMIT_OUTCOMES => "commit_outcomes.sql",
    PAUSE_LIMIT_KEYS => "pause_limit_keys.sql",
    LEARN_LIMIT_KEYS => "learn_limit_keys.sql",
    CLEAR_ENDED_PAUSES => "clear_ended_pauses.sql",
    LIFT_PAUSE => "lift_pause.sql",
    DELETE_ENDED_STATES => "delete_ended_states.sql",
    COMMITTED_OUTCOMES => "committed_outcomes.sql",
    COUNT_REAPED_FAILURES => "count_reaped_failures.sql",
    REAP_EXPIRED_LEASES => "reap_expired_leases.sql",
    FINISH_BATCHES => "finish_batches.sql",
    UPSERT_SUBJECTS => "upsert_subjects.sql",
    LIST_SUBJECTS => "list_subjects.sql",
    GET_SUBJECT => "get_subject.sql",
    DELETE_SUBJECT => "delete_subject.sql",
    LIST_BATCH_ITEMS => "list_batch_items.sql",
    LIST_FAILED_ITEMS => "list_failed_items.sql",
    RECORD_INVOCATION => "record_invocation.sql",
    LIST_INVOCATIONS => "list_invocations.sql",
    UPSERT_SCHEDULE => "upsert_schedule.sql",
    GET_SCHEDULE => "get_schedule.sql",
    LIST_SCHEDULES => "list_schedules.sql",
    DELETE_SCHEDULE => "delete_schedule.sql",
    DUE_SCHEDULES => "due_schedules.sql",
    ZONES_IN_USE => "zones_in_use.sql",
    KEY_PREFIX_USED_BY_OTHERS => "key_prefix_used_by_others.sql",
    CREATE_SCHEDULE_BATCH => "create_schedule_batch.sql",
    ADVANCE_SCHEDULE => "advance_schedule.sql",
    RECORD_FIRE_FAILURES => "record_fire_failures.sql",
    RECENT_THROUGHPUT => "recent_throughput.sql",
    BATCH_TIMELINE => "batch_timeline.sql",
    METRICS_SNAPSHOT => "metrics_snapshot.sql",
    COST_BY_SOURCE => "cost_by_source.sql",
    GET_BATCHES_BY_KEYS => "get_batches_by_keys.sql",
    FIRED_BATCHES => "fired_batches.sql",
    SET_BATCH_STATUS => "set_batch_status.sql",
    COUNT_CANCELLED_PAGE => "count_cancelled_page.sql",
    CANCEL_PENDING_PAGE => "cancel_pending_page.sql",
    ADVANCE_CANCELLED_CURSORS => "advance_cancelled_cursors.sql",
    REOPEN_FOR_REPLAY => "reopen_for_replay.sql",
    REQUEUE_FAILED_PAGE => "requeue_failed_page.sql",
    REOPEN_FOR_ITEM_REPLAY => "reopen_for_item_replay.sql",
    REQUEUE_FAILED_ITEM => "requeue_failed_item.sql",
    GET_ITEM => "get_item.sql",
    DELETE_EXPIRED_ITEMS => "delete_expired_items.sql",
    DELETE_EXPIRED_BATCHES => "delete_expired_batches.sql",
    DELETE_OLD_INVOCATIONS => "delete_old_invocations.sql",
    UPSERT_LIMIT => "upsert_limit.sql",
    GET_LIMIT => "get_limit.sql",
    LIST_LIMITS => "list_limits.sql",
    LIST_LEARNED_KEYS => "list_learned_keys.sql",
    DELETE_LIMIT_STATE => "delete_limit_state.sql",
    DELETE_LIMIT => "delete_limit.sql",
    HOLD_CURSORS_AFTER_LIMIT_DELETE => "hold_cursors_after_limit_delete.sql",
    // Elastic drain: the count and the slot hand-over read the claim's selection.
    COUNT_DRAIN_WORK => "claim_selection.sql" "key_rules.sql" "key_state.sql" "claim_room.sql" "count_drain_work.sql",
    ACQUIRE_DRAINER_SLOT => "acquire_drainer_slot.sql",
    PASS_DRAINER_SLOT => "claim_selection.sql" "key_rules.sql" "key_state.sql" "claim_room.sql" "pass_drainer_slot.sql",
    LIMIT_USAGE => "limit_usage.sql",
    LIST_PAUSED_KEYS => "list_paused_keys.sql",
    // What holds pending items: their keys read with the claim's rules (core::flow::waiting
    // decides per item), and the head of a batch for its counts.
    WAITING_KEYS => "waiting_held_keys.sql" "key_rules.sql" "key_state.sql" "waiting_keys.sql",
    WAITING_HEAD => "waiting_head.sql",
}
