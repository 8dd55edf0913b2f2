//! Structured logs: one JSON object per line, always with an `event` name, and the
//! batch and item ids where there are any. Secrets are never passed in.

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
