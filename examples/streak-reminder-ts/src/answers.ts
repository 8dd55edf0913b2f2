// What the three APIs' answers share: an answer read with a bound, a retry's
// delay (read by cron-fanout-handler's `waitSeconds`, as cron-fanout reads its
// receivers' answers), and text cut to fit a reason, with the secrets taken out.
import { waitSeconds } from "cron-fanout-handler";

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

/** The delay an answer asks for, in seconds, read at `nowMs` by the handler
 * package's reader (`waitSeconds`: cron-fanout's own rules, `Retry-After` in
 * seconds or as a date, Discord's and Telegram's body, GitHub's reset). */
export function retryAfterSeconds(answer: Answer, nowMs: number = Date.now()): number | undefined {
  return waitSeconds(answer, nowMs);
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
