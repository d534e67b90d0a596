// The caller's event stream from the operator API, followed for as long as the page lives:
// read with fetch (EventSource cannot send the token), split into server-sent events, each
// `envelope` event handed on parsed; a dropped stream is opened again with a growing pause
// (at most 10 s), at most 1,000 times.

const MAX_ATTEMPTS = 1000;

/**
 * `opened` runs each time the stream is (re)opened, before any event (the page redraws what it
 * may have missed); `lost` when it drops; `stopped()` ends the loop (signed out).
 */
export async function followEvents({ url, headers, stopped, opened, lost, onEnvelope }) {
  for (let attempt = 0; attempt < MAX_ATTEMPTS && !stopped(); attempt++) {
    try {
      const res = await fetch(url, { headers: headers() });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      await opened();
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true });
        for (let end = buf.indexOf("\n\n"); end >= 0; end = buf.indexOf("\n\n")) {
          const event = buf.slice(0, end);
          buf = buf.slice(end + 2);
          const data = /^data: (.*)$/m.exec(event);
          if (event.startsWith("event: envelope") && data) onEnvelope(JSON.parse(data[1]));
        }
      }
    } catch {
      // fall through to reconnect
    }
    lost();
    await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * 2 ** Math.min(attempt, 5))));
  }
}
