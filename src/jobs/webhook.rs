//! Built-in kind `webhook`: POST a signed JSON body to the subject's URL.
//! 2xx = done; 408, 425, 429, 5xx, timeout and network errors = retry; any other
//! status = permanent failure.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::JobKind;
use crate::core::model::{ClaimedItem, Outcome};

pub struct Webhook;

/// The subject payload of a webhook.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookPayload {
    pub url: String,
    #[serde(default)]
    pub data: Value,
}

/// The JSON body a webhook receives.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delivery<'a> {
    pub item_id: i64,
    pub batch_id: &'a str,
    pub subject_id: &'a str,
    pub attempt: i64,
    pub data: &'a Value,
}

pub fn parse_payload(payload: &Value) -> Result<WebhookPayload, String> {
    let p: WebhookPayload = serde_json::from_value(payload.clone()).map_err(|e| {
        format!("webhook payload must be {{\"url\": \"http(s)://...\", \"data\": <any>}}: {e}")
    })?;
    let rest = p
        .url
        .strip_prefix("https://")
        .or_else(|| p.url.strip_prefix("http://"))
        .ok_or_else(|| format!("url must start with http:// or https://, got {:?}", p.url))?;
    let host = rest.split(['/', '?', '#']).next().unwrap_or("");
    if host.is_empty() || p.url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "url {:?} has no host or contains whitespace",
            p.url
        ));
    }
    if p.url.len() > 2_048 {
        return Err("url must be at most 2048 bytes".into());
    }
    Ok(p)
}

/// The request body for one delivery.
pub fn delivery_body(item: &ClaimedItem, data: &Value) -> String {
    let delivery = Delivery {
        item_id: item.item_id,
        batch_id: &item.batch_id,
        subject_id: &item.subject_id,
        attempt: item.attempt,
        data,
    };
    serde_json::to_string(&delivery).expect("serialising plain data cannot fail")
}

/// Map an HTTP status to an outcome.
pub fn classify_status(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Done,
        408 | 425 | 429 | 500..=599 => Outcome::Retry(format!("HTTP {status}")),
        _ => Outcome::Fail(format!("HTTP {status}")),
    }
}

impl JobKind for Webhook {
    fn name(&self) -> &'static str {
        "webhook"
    }

    fn validate(&self, payload: &Value) -> Result<(), String> {
        parse_payload(payload).map(|_| ())
    }

    fn subrequests_per_run(&self) -> i64 {
        1
    }

    #[cfg(target_arch = "wasm32")]
    fn run<'a>(
        &'a self,
        ctx: &'a super::JobContext,
        item: &'a ClaimedItem,
    ) -> futures::future::LocalBoxFuture<'a, Outcome> {
        Box::pin(run(ctx, item))
    }
}

#[cfg(target_arch = "wasm32")]
async fn run(ctx: &super::JobContext, item: &ClaimedItem) -> Outcome {
    use worker::{Fetch, Headers, Method, Request, RequestInit};

    let payload = match serde_json::from_str::<Value>(&item.payload)
        .map_err(|e| e.to_string())
        .and_then(|v| parse_payload(&v))
    {
        Ok(p) => p,
        Err(e) => return Outcome::Fail(format!("invalid payload: {e}")),
    };
    let body = delivery_body(item, &payload.data);
    let now_secs = (worker::Date::now().as_millis() / 1_000) as i64;
    let signature = crate::core::signature::sign(&ctx.webhook_secret, now_secs, body.as_bytes());
    let request = (|| {
        let headers = Headers::new();
        headers.set("Content-Type", "application/json")?;
        headers.set("Idempotency-Key", &item.item_id.to_string())?;
        headers.set("Fanout-Signature", &signature)?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_headers(headers)
            .with_body(Some(body.into()));
        Request::new_with_init(&payload.url, &init)
    })();
    let request = match request {
        Ok(r) => r,
        Err(e) => return Outcome::Fail(format!("cannot build request: {e}")),
    };
    match Fetch::Request(request).send_with_signal(&ctx.signal).await {
        Ok(response) => classify_status(response.status_code()),
        Err(e) => Outcome::Retry(format!("network error: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn accepts_http_and_https_urls_with_optional_data() {
        let p = parse_payload(&json!({"url": "http://127.0.0.1:9000/hook/a?x=1"})).unwrap();
        assert_eq!(p.data, Value::Null);
        let p = parse_payload(&json!({"url": "https://example.com", "data": {"n": 1}})).unwrap();
        assert_eq!(p.data, json!({"n": 1}));
    }

    #[test]
    fn rejects_other_schemes_missing_hosts_and_extra_fields() {
        for bad in [
            json!({"url": "ftp://example.com"}),
            json!({"url": "javascript:alert(1)"}),
            json!({"url": "https://"}),
            json!({"url": "https:// example.com"}),
            json!({"url": 5}),
            json!({"data": 1}),
            json!({"url": "https://example.com", "method": "GET"}),
            json!("https://example.com"),
        ] {
            assert!(parse_payload(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn status_classes_follow_the_documented_table() {
        assert_eq!(classify_status(200), Outcome::Done);
        assert_eq!(classify_status(204), Outcome::Done);
        for s in [408, 425, 429, 500, 503, 599] {
            assert_eq!(classify_status(s), Outcome::Retry(format!("HTTP {s}")));
        }
        for s in [301, 400, 401, 404, 410, 422] {
            assert_eq!(classify_status(s), Outcome::Fail(format!("HTTP {s}")));
        }
    }

    #[test]
    fn delivery_body_has_exactly_the_documented_fields() {
        let item = ClaimedItem {
            item_id: 42,
            lease_token: "secret-token".into(),
            batch_id: "b1".into(),
            subject_id: "s1".into(),
            attempt: 2,
            max_attempts: 5,
            kind: "webhook".into(),
            payload: "{}".into(),
        };
        let body: Value = serde_json::from_str(&delivery_body(&item, &json!({"k": "v"}))).unwrap();
        assert_eq!(
            body,
            json!({"item_id": 42, "batch_id": "b1", "subject_id": "s1", "attempt": 2, "data": {"k": "v"}})
        );
    }
}
