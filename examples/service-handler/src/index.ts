// A `service` handler: cron-fanout POSTs each item here through a service
// binding, with the body {item_id, batch_id, subject_id, attempt, data} and the
// headers Content-Type: application/json and Idempotency-Key: <item_id>.
// Answer 2xx when the item is done; 408, 425, 429 or 5xx to have it retried
// (with Retry-After: <seconds> to choose when); any other status fails it for
// good, and then the first 200 bytes of the answer's text end up in its
// last_error.
//
// This one does what the item's `data` asks, so the e2e suite can ask for each
// answer: {"answer": 503, "times": 1} answers 503 to attempt 1, then 200;
// {"sleep_ms": 5000, "times": 1} answers attempt 1 late; {"retry_after": 2}
// adds Retry-After: 2 to the failing answers; {"text": "..."} is their text.

interface Delivery {
  item_id: number;
  batch_id: string;
  subject_id: string;
  attempt: number;
  data: {
    answer?: number;
    times?: number;
    text?: string;
    sleep_ms?: number;
    retry_after?: number;
  } | null;
}

export default {
  async fetch(request: Request): Promise<Response> {
    if (request.method !== "POST") {
      return new Response("POST only", { status: 405 });
    }
    const item = (await request.json()) as Delivery;
    // The same for every attempt of one item: use it to do the work only once.
    const key = request.headers.get("Idempotency-Key");
    const data = item.data ?? {};
    // Misbehave on the first `times` attempts (all of them without `times`).
    const early = item.attempt <= (data.times ?? Number.MAX_SAFE_INTEGER);
    if (data.sleep_ms && early) {
      await new Promise((resolve) => setTimeout(resolve, data.sleep_ms));
    }
    if (data.answer === undefined || !early) {
      const path = new URL(request.url).pathname;
      return new Response(`done: item ${key} at ${path}`, { status: 200 });
    }
    const headers = new Headers();
    if (data.retry_after !== undefined) {
      headers.set("Retry-After", String(data.retry_after));
    }
    const text = data.text ?? `answer ${data.answer} to attempt ${item.attempt}`;
    return new Response(text, { status: data.answer, headers });
  },
};
