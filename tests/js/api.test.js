import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";
import { installDom } from "./dom.js";
import { ApiError, api, errorOf, optional, session } from "../../src/corral/frontend/ui/js/api.js";

installDom();
const realFetch = globalThis.fetch;
let calls = [];
function answer(status, body, headers = {}) {
  globalThis.fetch = async (path, init) => {
    calls.push({ path, init });
    return new Response(body === undefined ? null : typeof body === "string" ? body : JSON.stringify(body), { status, headers });
  };
}
beforeEach(() => { calls = []; session.key = "k-1"; session.verified = false; session.onLogout = () => {}; });
afterEach(() => { globalThis.fetch = realFetch; });

test("the key is sent as a bearer token and JSON bodies as JSON", async () => {
  answer(200, { ok: true });
  assert.deepEqual(await api("/api/x", { method: "POST", body: { a: 1 } }), { ok: true });
  assert.equal(calls[0].init.headers.Authorization, "Bearer k-1");
  assert.equal(calls[0].init.headers["Content-Type"], "application/json");
  assert.equal(calls[0].init.body, '{"a":1}');
});

test("the server's own message becomes the error: OpenAI envelope, detail, or status line", async () => {
  assert.equal((await errorOf(new Response(JSON.stringify({ error: { message: "no such model" } }), { status: 404 }))).message, "no such model");
  assert.equal((await errorOf(new Response(JSON.stringify({ detail: "min_replicas: must be ≥ 0" }), { status: 400 }))).message, "min_replicas: must be ≥ 0");
  const plain = await errorOf(new Response("boom", { status: 502, statusText: "Bad Gateway" }));
  assert.equal(plain.message, "502 Bad Gateway");
  assert.equal(plain.status, 502);
  answer(409, { detail: { message: "busy" } });
  await assert.rejects(api("/api/x"), (err) => err instanceof ApiError && err.status === 409 && err.message === "busy");
});

test("a 401 after the key was accepted logs out; before, it is only an error", async () => {
  let loggedOut = null;
  session.onLogout = (message) => { loggedOut = message; };
  answer(401, { detail: "no" });
  await assert.rejects(api("/api/x"), { status: 401 });
  assert.equal(loggedOut, null);
  session.verified = true;
  await assert.rejects(api("/api/x"), { status: 401 });
  assert.match(loggedOut, /log in again/);
});

test("204 and empty bodies answer null; optional() answers null for an absent route", async () => {
  answer(204);
  assert.equal(await api("/api/x", { method: "DELETE" }), null);
  answer(404, { detail: "Not Found" });
  assert.equal(await optional("/api/absent"), null);
  answer(500, { detail: "down" });
  await assert.rejects(optional("/api/x"), { message: "down" });
});

test("the key lives in sessionStorage only", () => {
  session.key = "secret";
  assert.equal(sessionStorage.getItem("corral.adminKey"), "secret");
  assert.equal(localStorage.getItem("corral.adminKey"), null);
  session.key = "";
  assert.equal(sessionStorage.getItem("corral.adminKey"), null);
});
