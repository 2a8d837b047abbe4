// The Models page's "Try" panel: one form per capability of a model, each calling the /v1 endpoint with the
// signed-in key. Transcription uploads an audio file and shows the text; speech plays the returned WAV (and
// offers it as a download); an image shows the b64 result; embeddings show the dimension and the first values;
// rerank lists the documents best first with their scores. A cold model's load shows inline and the call is
// retried by itself (cold.js); a failure shows the server's own message.

import { request } from "../api.js";
import { untilLoaded } from "../cold.js";
import { html, useEffect, useRef, useState } from "../lib.js";
import { bytes } from "../format.js";
import { loadLine } from "../load.js";
import { errorBox, link } from "../ui.js";

const IMAGE_SIZES = ["64x64", "128x128", "256x256", "512x512"];
const IMAGE_SIZE_DEFAULT = "256x256";
const EMBEDDING_VALUES_SHOWN = 8;
const SCORE_DIGITS = 4;
const AUDIO_TYPES = "audio/*,.wav,.mp3,.flac,.ogg,.opus,.m4a,.webm";

// The capabilities a Try panel has a form for, in the order the forms appear.
export const TRIED = ["transcription", "tts", "image", "embeddings", "rerank"];

export function canTry(model) {
  return (model.capabilities || []).some((c) => TRIED.includes(c) || c === "chat");
}

function field(label, control) {
  return html`<label class="field"><span>${label}</span>${control}</label>`;
}

// POST `body` (JSON object or FormData) to `path` until the model is loaded; the successful Response.
function call(path, body, onLoading, signal) {
  return untilLoaded(() => request(path, { method: "POST", body, signal }), { onLoading, signal });
}

// One capability's form: `run(form, onLoading)` answers what the result area shows. The form's data-state is
// idle, running, loading (the model is cold), done or failed, so a test (or a reader of the DOM) can follow it.
function TryForm({ capability, title, label, run, children }) {
  const [state, setState] = useState("idle");
  const [out, setOut] = useState(null);
  const onLoading = (body) => {
    setState("loading");
    setOut(html`<p class="small muted">${body.error?.message || "loading…"}</p>${body.loading ? loadLine(body.loading) : null}`);
  };
  const submit = async (event) => {
    event.preventDefault();
    const form = event.currentTarget;
    setState("running");
    setOut(html`<p class="small muted">working…</p>`);
    try {
      const shown = await run(form, onLoading);
      setOut(shown);
      setState("done");
    } catch (err) {
      if (err.name === "AbortError") return; // the page was left
      setOut(errorBox(err));
      setState("failed");
    }
  };
  const busy = state === "running" || state === "loading";
  return html`<form class="try-form stack" data-testid=${`try-${capability}`} data-capability=${capability}
      data-state=${state} onSubmit=${submit}>
    <h3>${title}</h3>${children}
    <div class="row"><button type="submit" class="btn primary small" disabled=${busy}>${label}</button></div>
    <div class="try-out" aria-live="polite" data-testid="try-result">${out}</div></form>`;
}

const value = (form, name) => form.elements[name].value;

function Transcription({ model, signal }) {
  return html`<${TryForm} capability="transcription" title="Transcribe" label="Transcribe" run=${async (form, onLoading) => {
    const body = new FormData();
    body.append("file", form.elements.file.files[0]);
    body.append("model", model);
    body.append("response_format", "json");
    if (value(form, "language").trim()) body.append("language", value(form, "language").trim());
    const answer = await (await call("/v1/audio/transcriptions", body, onLoading, signal)).json();
    return html`<p class="try-text" data-testid="transcript">${answer.text || "(no speech heard)"}</p>`;
  }}>
    ${field("Audio file", html`<input type="file" name="file" accept=${AUDIO_TYPES} required aria-label="Audio file" />`)}
    ${field("Language (optional)", html`<input name="language" placeholder="auto" maxlength="16" aria-label="Language" />`)}
  <//>`;
}

function Speech({ model, signal, urls }) {
  return html`<${TryForm} capability="tts" title="Speak" label="Speak" run=${async (form, onLoading) => {
    const response = await call("/v1/audio/speech", { model, input: value(form, "input"), voice: value(form, "voice").trim(),
      response_format: "wav" }, onLoading, signal);
    const blob = await response.blob();
    for (const old of urls.splice(0)) URL.revokeObjectURL(old); // the previous answer's audio
    const url = URL.createObjectURL(blob);
    urls.push(url);
    return html`<${Played} url=${url} size=${blob.size} model=${model} />`;
  }}>
    ${field("Text", html`<textarea name="input" rows="2" required maxlength="4096" aria-label="Text to speak"></textarea>`)}
    ${field("Voice (optional)", html`<input name="voice" placeholder="default" aria-label="Voice" />`)}
  <//>`;
}

function Played({ url, size, model }) {
  const audio = useRef(null);
  useEffect(() => { audio.current?.play().catch(() => { /* autoplay refused: the controls play it */ }); }, [url]);
  return html`<div class="stack"><audio ref=${audio} controls src=${url} data-testid="speech" data-bytes=${size}></audio>
    <div class="small"><a href=${url} download=${`${model}-speech.wav`}>Download WAV</a><span class="muted">${` · ${bytes(size)}`}</span></div></div>`;
}

function Image({ model, signal }) {
  return html`<${TryForm} capability="image" title="Generate an image" label="Generate" run=${async (form, onLoading) => {
    const size = value(form, "size");
    const prompt = value(form, "prompt");
    const answer = await (await call("/v1/images/generations", { model, prompt, size, n: 1,
      response_format: "b64_json" }, onLoading, signal)).json();
    const [width, height] = size.split("x");
    return html`<img class="try-image" src=${`data:image/png;base64,${answer.data[0].b64_json}`} alt=${prompt}
      width=${width} height=${height} data-testid="image" />`;
  }}>
    ${field("Prompt", html`<input name="prompt" required maxlength="4096" placeholder="a red fox in the snow" aria-label="Prompt" />`)}
    ${field("Size", html`<select name="size" aria-label="Size">
      ${IMAGE_SIZES.map((s) => html`<option value=${s} selected=${s === IMAGE_SIZE_DEFAULT}>${s}</option>`)}</select>`)}
  <//>`;
}

function Embeddings({ model, signal }) {
  return html`<${TryForm} capability="embeddings" title="Embed" label="Embed" run=${async (form, onLoading) => {
    const answer = await (await call("/v1/embeddings", { model, input: value(form, "input") }, onLoading, signal)).json();
    const vector = answer.data[0].embedding;
    return html`<dl class="kv" data-testid="embedding" data-dimension=${vector.length}>
      <dt>dimension</dt><dd>${String(vector.length)}</dd>
      <dt>first values</dt><dd><code>${vector.slice(0, EMBEDDING_VALUES_SHOWN).map((v) => v.toFixed(SCORE_DIGITS)).join(", ")}${
        vector.length > EMBEDDING_VALUES_SHOWN ? ", …" : ""}</code></dd></dl>`;
  }}>
    ${field("Text", html`<textarea name="input" rows="2" required aria-label="Text to embed"></textarea>`)}
  <//>`;
}

function Rerank({ model, signal }) {
  return html`<${TryForm} capability="rerank" title="Rerank" label="Rerank" run=${async (form, onLoading) => {
    const docs = value(form, "documents").split("\n").map((d) => d.trim()).filter(Boolean);
    const answer = await (await call("/v1/rerank", { model, query: value(form, "query"), documents: docs }, onLoading,
      signal)).json();
    return html`<ol class="list ranked" data-testid="ranking">${answer.results.map((r) => html`<li class="row between" data-index=${r.index}>
      <span>${docs[r.index]}</span><code>${r.relevance_score.toFixed(SCORE_DIGITS)}</code></li>`)}</ol>`;
  }}>
    ${field("Query", html`<input name="query" required aria-label="Query" />`)}
    ${field("Documents (one per line)", html`<textarea name="documents" rows="4" required aria-label="Documents, one per line"></textarea>`)}
  <//>`;
}

const FORMS = { transcription: Transcription, tts: Speech, image: Image, embeddings: Embeddings, rerank: Rerank };

// The panel for `model` ({name, capabilities}); `signal` aborts its calls when the page is left, `urls` collects
// the object URLs it made (the page revokes them).
export function TryPanel({ model, signal, urls, onClose }) {
  const caps = model.capabilities || [];
  const forms = TRIED.filter((c) => caps.includes(c));
  const ref = useRef(null);
  useEffect(() => { ref.current?.scrollIntoView({ block: "nearest" }); }, []);
  return html`<section ref=${ref} class="panel try" data-testid="try" data-model=${model.name}>
    <header class="panel-head"><h2>${`Try ${model.name}`}</h2>
      <div class="row">${caps.includes("chat") ? link(`/app/chat?model=${encodeURIComponent(model.name)}`, "Chat with it") : null}
        <button type="button" class="btn ghost small" onClick=${onClose}>Close</button></div></header>
    ${forms.length ? html`<div class="grid try-forms">${forms.map((c) => {
      const Form = FORMS[c];
      return html`<${Form} key=${c} model=${model.name} signal=${signal} urls=${urls} />`;
    })}</div>` : html`<p class="empty">This model chats: try it on the Chat page.</p>`}</section>`;
}
