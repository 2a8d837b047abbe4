import assert from "node:assert/strict";
import { test } from "node:test";
import { parseSse, sseEvents } from "../../src/corral/frontend/ui/js/api.js";
import { payloadOf, statusText } from "../../src/corral/frontend/ui/js/live.js";

test("complete events are cut off, the rest waits for more bytes", () => {
  const { events, rest } = parseSse('event: node\ndata: {"kind":"node"}\n\ndata: partial');
  assert.deepEqual(events, [{ event: "node", data: '{"kind":"node"}' }]);
  assert.equal(rest, "data: partial");
});

test("data lines join with newlines; the default event is message; comments are dropped", () => {
  const { events } = parseSse(": keepalive\n\ndata: a\ndata:b\n\n");
  assert.deepEqual(events, [{ event: "message", data: "a\nb" }]);
});

test("CRLF line ends parse as LF", () => {
  const { events, rest } = parseSse("event: load\r\ndata: x\r\n\r\n");
  assert.deepEqual(events, [{ event: "load", data: "x" }]);
  assert.equal(rest, "");
});

test("sseEvents reads events split across chunks of a body", async () => {
  const chunks = ["event: hel", "lo\ndata: {}\n", "\ndata: [DONE]\n\n"];
  const body = new ReadableStream({
    start(controller) {
      for (const c of chunks) controller.enqueue(new TextEncoder().encode(c));
      controller.close();
    },
  });
  const seen = [];
  for await (const e of sseEvents(new Response(body))) seen.push(e);
  assert.deepEqual(seen, [{ event: "hello", data: "{}" }, { event: "message", data: "[DONE]" }]);
});

test("a live event's payload is its JSON, else its kind", () => {
  assert.deepEqual(payloadOf({ event: "node", data: '{"kind":"node","id":"x"}' }), { kind: "node", id: "x" });
  assert.deepEqual(payloadOf({ event: "resync", data: "now" }), { kind: "resync" });
  assert.deepEqual(payloadOf({ event: "config", data: "42" }), { kind: "config" });
});

test("the live badge says what it waits for", () => {
  assert.equal(statusText("live"), "live");
  assert.equal(statusText("connecting"), "connecting to /api/events…");
  assert.equal(statusText("reconnecting", "503"), "reconnecting to /api/events… (503)");
  assert.equal(statusText("offline"), "waiting for login");
});
