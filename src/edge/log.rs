//! Structured logs: one JSON object per line, always with an `event` name, and the
//! batch and item ids where there are any. Secrets are never passed in. The lines
//! of a scheduled invocation, a drainer and a child run also carry `invocation`
//! ([`InvocationLog`]).

use serde_json::{Map, Value};

pub fn event(name: &str, fields: Value) {
    let mut obj = Map::new();
    obj.insert("event".into(), Value::from(name));
    if let Value::Object(fields) = fields {
        obj.extend(fields);
    }
    worker::console_log!("{}", Value::Object(obj));
}

pub fn error(name: &str, fields: Value) {
    let mut obj = Map::new();
    obj.insert("event".into(), Value::from(name));
    obj.insert("level".into(), Value::from("error"));
    if let Value::Object(fields) = fields {
        obj.extend(fields);
    }
    worker::console_error!("{}", Value::Object(obj));
}

/// The log of one invocation (a tick, a drainer) or of a child run for one:
/// every line carries `invocation`, the id its items' outbound calls carry as
/// `Fanout-Invocation` and `GET /invocations` shows. Passed along, never kept in
/// a global: invocations of one isolate interleave.
pub struct InvocationLog {
    id: String,
}

impl InvocationLog {
    pub fn new(id: String) -> InvocationLog {
        InvocationLog { id }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn event(&self, name: &str, fields: Value) {
        event(name, self.tagged(fields))
    }

    pub fn error(&self, name: &str, fields: Value) {
        error(name, self.tagged(fields))
    }

    fn tagged(&self, mut fields: Value) -> Value {
        if let Value::Object(map) = &mut fields {
            map.insert("invocation".into(), Value::from(self.id.as_str()));
        }
        fields
    }
}
