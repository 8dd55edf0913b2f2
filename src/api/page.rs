//! The dashboard: one hand-written page with its script, style sheet and icon
//! (`src/dashboard/`), embedded in the Worker with `include_str!`. No build step
//! and no second deployment artefact: `wrangler dev` and `wrangler deploy` stay as
//! they are, and the page cannot drift from the Worker that serves it.
//!
//! Everything is served under a Content-Security-Policy that allows only this
//! origin (no inline script or style, no other host), so the page works offline
//! and an injected string can never run. The page holds no data: it asks the
//! admin routes with the token the operator signs in with.

use super::routes::{Asset, ROUTES};
use super::Text;
use crate::core::batch::control::{decide, BatchStatus, Control, Move};
use crate::core::batch::model::ItemStatus;

/// Only this origin, for everything; nothing inline; no framing, no forms posted
/// elsewhere, no `<base>` tricks.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
    img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; \
    frame-ancestors 'none'";

const HTML: &str = include_str!("../dashboard/index.html");
const SCRIPT: &str = include_str!("../dashboard/app.js");
const STYLE: &str = include_str!("../dashboard/app.css");
const ICON: &str = include_str!("../dashboard/icon.svg");

/// Computes what a slot is filled with.
type Fill = fn() -> String;

/// What the Worker tells the page, each in a `<meta>` of `index.html` filled in
/// here: the optional views its route table enables, and the rules of `core` the
/// page shows (which batch action does something in which status, the item
/// statuses), so the page never keeps a copy of them that could drift.
const SLOTS: &[(&str, Fill)] = &[
    ("{{features}}", features),
    ("{{actions}}", actions),
    ("{{item-statuses}}", item_statuses),
];

/// The parts of the page that exist only once their routes do, each with the
/// route that enables it. Read from the route table, so the page never probes
/// for routes (and never logs a 404 doing so).
const FEATURES: &[(&str, &str)] = &[
    ("schedules", "/schedules"),
    ("batch-control", "/batches/{id}/pause"),
    ("limits", "/limits"),
];

/// The features this Worker's route table enables, space-separated.
pub fn features() -> String {
    FEATURES
        .iter()
        .filter(|(_, path)| ROUTES.iter().any(|r| r.path == *path))
        .map(|(name, _)| *name)
        .collect::<Vec<_>>()
        .join(" ")
}

/// For each batch action, the batch statuses it moves a batch out of
/// (`core::control::decide`; a replay: `BatchStatus::takes_replays`), e.g.
/// `pause:running resume:paused cancel:running,paused retry:running,paused,finished`.
/// The page enables an action only there: elsewhere it is a no-op (pausing a
/// paused batch) or refused with 409.
pub fn actions() -> String {
    let statuses = |keep: &dyn Fn(BatchStatus) -> bool| {
        BatchStatus::ALL
            .into_iter()
            .filter(|&s| keep(s))
            .map(BatchStatus::as_str)
            .collect::<Vec<_>>()
            .join(",")
    };
    Control::ALL
        .into_iter()
        .map(|c| {
            let moves = statuses(&|s| matches!(decide(c, s), Move::To(_)));
            format!("{}:{moves}", c.as_str())
        })
        .chain([format!("retry:{}", statuses(&BatchStatus::takes_replays))])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every item status, in the order the page lists them (its status tabs).
pub fn item_statuses() -> String {
    ItemStatus::ALL.map(ItemStatus::as_str).join(" ")
}

/// The asset with its content type and the security headers.
pub fn serve(asset: Asset) -> Text {
    let (content_type, body) = match asset {
        Asset::Html => (
            "text/html; charset=utf-8",
            SLOTS.iter().fold(HTML.to_string(), |html, (slot, fill)| {
                html.replace(slot, &fill())
            }),
        ),
        Asset::Script => ("text/javascript; charset=utf-8", SCRIPT.to_string()),
        Asset::Style => ("text/css; charset=utf-8", STYLE.to_string()),
        Asset::Icon => ("image/svg+xml", ICON.to_string()),
    };
    Text {
        status: 200,
        content_type,
        headers: vec![
            ("Content-Security-Policy", CSP),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            // A deploy shows at once; the files are small.
            ("Cache-Control", "no-cache"),
        ],
        body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(asset: Asset) -> Text {
        serve(asset)
    }

    #[test]
    fn the_page_loads_only_same_origin_files_and_nothing_inline() {
        let html = text(Asset::Html).body;
        assert!(html.contains(r#"<script src="/dashboard/app.js" defer></script>"#));
        assert!(html.contains(r#"<link rel="stylesheet" href="/dashboard/app.css">"#));
        assert!(!html.contains("{{"), "a slot was left unfilled");
        // No inline script or style for the CSP to refuse, no other host.
        assert_eq!(html.matches("<script").count(), 1);
        assert!(!html.contains("<style") && !html.contains(" style="));
        assert!(!has_inline_handler(&html));
        for asset in [Asset::Html, Asset::Script, Asset::Style] {
            // The SVG namespace is a name, not a place anything is loaded from.
            let body = text(asset).body.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !body.contains("http://") && !body.contains("https://"),
                "{asset:?}"
            );
        }
    }

    fn has_inline_handler(html: &str) -> bool {
        ["onclick=", "onload=", "onsubmit=", "onerror=", "oninput="]
            .iter()
            .any(|h| html.contains(h))
    }

    #[test]
    fn every_asset_carries_the_csp_and_its_type() {
        for (asset, ct) in [
            (Asset::Html, "text/html; charset=utf-8"),
            (Asset::Script, "text/javascript; charset=utf-8"),
            (Asset::Style, "text/css; charset=utf-8"),
            (Asset::Icon, "image/svg+xml"),
        ] {
            let t = text(asset);
            assert_eq!((t.status, t.content_type), (200, ct));
            assert!(t.headers.contains(&("Content-Security-Policy", CSP)));
            assert!(t.headers.contains(&("X-Content-Type-Options", "nosniff")));
        }
        assert!(CSP.contains("default-src 'none'") && CSP.contains("script-src 'self'"));
        assert!(!CSP.contains("unsafe"));
    }

    #[test]
    fn features_follow_the_route_table_and_the_page_knows_their_names() {
        let on = features();
        for (name, path) in FEATURES {
            let routed = ROUTES.iter().any(|r| r.path == *path);
            assert_eq!(on.split(' ').any(|f| f == *name), routed, "{name}");
            // The page marks the place of each feature by the same name.
            let marked = format!("data-feature=\"{name}\"");
            let in_page = HTML.contains(&marked) || SCRIPT.contains(&format!("\"{name}\""));
            assert!(in_page, "the page has no place for {name}");
        }
        let html = text(Asset::Html).body;
        let meta = format!(r#"<meta name="cron-fanout-features" content="{on}">"#);
        assert!(html.contains(&meta), "{meta}");
    }

    #[test]
    fn actions_follow_the_transition_table() {
        assert_eq!(
            actions(),
            "pause:running resume:paused cancel:running,paused retry:running,paused,finished"
        );
        let html = text(Asset::Html).body;
        let meta = format!(
            r#"<meta name="cron-fanout-actions" content="{}">"#,
            actions()
        );
        assert!(html.contains(&meta), "{meta}");
        // The page has a button for each action, under the same name.
        for part in actions().split(' ') {
            let name = part.split(':').next().unwrap();
            assert!(SCRIPT.contains(&format!("name: \"{name}\"")), "{name}");
        }
    }

    #[test]
    fn the_page_lists_every_item_status() {
        let html = text(Asset::Html).body;
        let meta = r#"<meta name="cron-fanout-item-statuses" content="pending processing completed failed cancelled">"#;
        assert!(html.contains(meta), "{html}");
    }
}
