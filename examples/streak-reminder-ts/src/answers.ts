// What the three APIs' answers share: an answer read with a bound, a retry's
// delay (`Retry-After` in seconds, which Discord sends with a fraction, or the
// delay in the JSON body as Discord and Telegram also give it), and text cut to
// fit a reason, with the secrets taken out.

/** An answer as read: its status, headers and at most a bound of its body. */
export interface Answer {
  status: number;
  headers: Headers;
  body: string;
}

/** Bytes of an answer's text kept in a reason, as cron-fanout keeps them. */
export const MAX_TEXT_BYTES = 200;

/** `response` read: its body up to `maxBytes` (what is past it is not read). */
export async function readAnswer(response: Response, maxBytes: number): Promise<Answer> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  if (response.body !== null) {
    const reader = response.body.getReader();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      chunks.push(value.subarray(0, Math.max(0, maxBytes - size)));
      size += value.byteLength;
      if (size >= maxBytes) {
        await reader.cancel();
        break;
      }
    }
  }
  const all = new Uint8Array(chunks.reduce((n, c) => n + c.byteLength, 0));
  let at = 0;
  for (const c of chunks) {
    all.set(c, at);
    at += c.byteLength;
  }
  return { status: response.status, headers: response.headers, body: new TextDecoder().decode(all) };
}

/** The delay a rate-limited answer asks for, in seconds: `Retry-After` (a
 * fraction allowed), else the body's `retry_after` (Discord) or
 * `parameters.retry_after` (Telegram). An HTTP date is not used: the sender's
 * clock is not ours. */
export function retryAfterSeconds(answer: Answer): number | undefined {
  const header = answer.headers.get("Retry-After");
  let seconds = header !== null && header.trim() !== "" ? Number(header.trim()) : Number.NaN;
  if (Number.isNaN(seconds)) {
    try {
      const body = JSON.parse(answer.body) as {
        retry_after?: unknown;
        parameters?: { retry_after?: unknown };
      };
      const said = body.retry_after ?? body.parameters?.retry_after;
      if (typeof said === "number") seconds = said;
    } catch {
      // No JSON: no delay in it.
    }
  }
  return Number.isFinite(seconds) && seconds >= 0 && seconds <= 86_400 ? seconds : undefined;
}

/** `text` on one line, cut to the bytes a reason keeps. */
export function cut(text: string): string {
  const encoder = new TextEncoder();
  let out = "";
  let size = 0;
  for (const ch of text) {
    size += encoder.encode(ch).byteLength;
    if (size > MAX_TEXT_BYTES) break;
    out += ch;
  }
  return out.replace(/[\u0000-\u001f\u007f-\u009f]/g, " ").trim();
}

/** `text` with every secret in it replaced: an error from the runtime's fetch
 * may quote the URL, and Telegram's has the bot token in its path. */
export function scrub(text: string, secrets: readonly string[]): string {
  return secrets.filter((s) => s !== "").reduce((t, s) => t.split(s).join("[redacted]"), text);
}

/** What a status means, as cron-fanout maps a webhook's: 2xx done (`null`
 * here), 408, 425, 429 and 5xx a retry, anything else (a 3xx too: redirects
 * are never followed) a permanent failure. */
export function statusMeans(status: number): "retry" | "fail" | null {
  if (status >= 200 && status < 300) return null;
  if ([408, 425, 429].includes(status) || (status >= 500 && status < 600)) return "retry";
  return "fail";
}
