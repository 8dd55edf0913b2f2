//! The Worker under test and how the harness controls it: `wrangler dev` on a
//! state dir of our own (`wrangler`), its test clock (`clock`), its local secrets
//! (`devvars`) and its HTTP API, cron firing included (`api`, the shapes of its
//! answers in `answers`), whose JSON answers are recorded and checked against
//! the Worker's OpenAPI description (`openapi`).
//! It imports nothing else of the harness.

pub mod answers;
pub mod api;
pub mod clock;
pub mod devvars;
pub mod openapi;
pub mod wrangler;
