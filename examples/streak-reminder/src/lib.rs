//! streak-reminder: the app cron-fanout's idea came from, as a Worker of its
//! own on the library. Subjects are users (a GitHub login, a zone, a Discord
//! webhook and/or a Telegram chat); a daily schedule at 18:00 in each user's
//! zone runs one `streak_check` item per user, each in a fresh invocation.
//!
//! The pure parts (`streak`, `github`, `notify`, `answers`, `settings`) and the
//! kind are host-tested; only the entry points below need the Workers runtime.

pub mod answers;
pub mod github;
pub mod kind;
pub mod notify;
pub mod settings;
pub mod streak;

pub use kind::{StreakCheck, StreakPayload, KIND};
pub use settings::Settings;

/// The kinds this Worker runs: the built-in ones and `streak_check`.
pub fn fanout() -> cron_fanout::Fanout {
    cron_fanout::Fanout::new().job(StreakCheck)
}

#[cfg(target_arch = "wasm32")]
mod entry {
    use worker::{event, Context, Env, Request, Response, Result, ScheduleContext, ScheduledEvent};

    #[event(start)]
    fn start() {
        cron_fanout::edge::start();
    }

    #[event(fetch)]
    async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
        super::fanout().fetch(req, env, ctx).await
    }

    #[event(scheduled)]
    async fn scheduled(event: ScheduledEvent, env: Env, ctx: ScheduleContext) {
        super::fanout().scheduled(event, env, ctx).await
    }
}
