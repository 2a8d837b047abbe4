// The Models page's "Try" panel: one form per capability of a model, each calling the /v1 endpoint with the
// signed-in key. Transcription uploads an audio file and shows the text; speech plays the returned WAV (and
// offers it as a download); an image shows the b64 result; embeddings show the dimension and the first values;
// rerank lists the documents best first with their scores. A cold model's load shows inline and the call is
// retried by itself (cold.js); a failure shows the server's own message.

import { request } from "../api.js";
import { untilLoaded } from "../cold.js";
import { errorBox, h } from "../dom.js";
import { bytes } from "../format.js";
import { loadLine } from "../load.js";
import { link } from "../ui.js";

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
  return h("label", { class: "field" }, h("span", {}, label), control);
}

// POST `body` (JSON object or FormData) to `path` until the model is loaded; the successful Response.
function call(path, body, onLoading, signal) {
  return untilLoaded(() => request(path, { method: "POST", body, signal }), { onLoading, signal });
}

// One capability's form: `run(onLoading)` answers what the result area shows. The form's data-state is idle,
// running, loading (the model is cold), done or failed, so a test (or a reader of the DOM) can follow it.
function tryForm(capability, title, fields, label, run) {
  const out = h("div", { class: "try-out", "aria-live": "polite", dataset: { testid: "try-result" } });
  const submit = h("button", { type: "submit", class: "btn primary small" }, label);
  const form = h("form", { class: "try-form stack", dataset: { testid: `try-${capability}`, capability, state: "idle" } },
    h("h3", {}, title), fields, h("div", { class: "row" }, submit), out);
  const onLoading = (body) => {
    form.dataset.state = "loading";
    out.replaceChildren(h("p", { class: "small muted" }, body.error?.message || "loading…"),
      body.loading ? loadLine(body.loading) : null);
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    submit.disabled = true;
    form.dataset.state = "running";
    out.replaceChildren(h("p", { class: "small muted" }, "working…"));
    try {
      out.replaceChildren(await run(onLoading));
      form.dataset.state = "done";
    } catch (err) {
      if (err.name === "AbortError") return; // the page was left
      out.replaceChildren(errorBox(err));
      form.dataset.state = "failed";
    } finally {
      submit.disabled = false;
    }
  });
  return form;
}

function transcription(model, signal) {
  const file = h("input", { type: "file", name: "file", accept: AUDIO_TYPES, required: true, "aria-label": "Audio file" });
  const language = h("input", { name: "language", placeholder: "auto", maxlength: 16, "aria-label": "Language" });
  return tryForm("transcription", "Transcribe", [field("Audio file", file), field("Language (optional)", language)],
    "Transcribe", async (onLoading) => {
      const form = new FormData();
      form.append("file", file.files[0]);
      form.append("model", model);
      form.append("response_format", "json");
      if (language.value.trim()) form.append("language", language.value.trim());
      const answer = await (await call("/v1/audio/transcriptions", form, onLoading, signal)).json();
      return h("p", { class: "try-text", dataset: { testid: "transcript" } }, answer.text || "(no speech heard)");
    });
}

function speech(model, signal, urls) {
  const text = h("textarea", { name: "input", rows: 2, required: true, maxlength: 4096, "aria-label": "Text to speak" },
    "");
  const voice = h("input", { name: "voice", placeholder: "default", "aria-label": "Voice" });
  return tryForm("tts", "Speak", [field("Text", text), field("Voice (optional)", voice)], "Speak", async (onLoading) => {
    const response = await call("/v1/audio/speech", { model, input: text.value, voice: voice.value.trim(),
      response_format: "wav" }, onLoading, signal);
    const blob = await response.blob();
    for (const old of urls.splice(0)) URL.revokeObjectURL(old); // the previous answer's audio
    const url = URL.createObjectURL(blob);
    urls.push(url);
    const audio = h("audio", { controls: true, src: url, dataset: { testid: "speech", bytes: blob.size } });
    audio.play().catch(() => { /* autoplay refused: the controls play it */ });
    return h("div", { class: "stack" }, audio,
      h("div", { class: "small" }, h("a", { href: url, download: `${model}-speech.wav` }, "Download WAV"),
        h("span", { class: "muted" }, ` · ${bytes(blob.size)}`)));
  });
}

function image(model, signal) {
  const prompt = h("input", { name: "prompt", required: true, maxlength: 4096, placeholder: "a red fox in the snow",
    "aria-label": "Prompt" });
  const size = h("select", { name: "size", "aria-label": "Size" },
    IMAGE_SIZES.map((s) => h("option", { value: s, selected: s === IMAGE_SIZE_DEFAULT }, s)));
  return tryForm("image", "Generate an image", [field("Prompt", prompt), field("Size", size)], "Generate",
    async (onLoading) => {
      const answer = await (await call("/v1/images/generations", { model, prompt: prompt.value, size: size.value, n: 1,
        response_format: "b64_json" }, onLoading, signal)).json();
      const [width, height] = size.value.split("x");
      return h("img", { class: "try-image", src: `data:image/png;base64,${answer.data[0].b64_json}`, alt: prompt.value,
        width, height, dataset: { testid: "image" } });
    });
}

function embeddings(model, signal) {
  const text = h("textarea", { name: "input", rows: 2, required: true, "aria-label": "Text to embed" }, "");
  return tryForm("embeddings", "Embed", field("Text", text), "Embed", async (onLoading) => {
    const answer = await (await call("/v1/embeddings", { model, input: text.value }, onLoading, signal)).json();
    const vector = answer.data[0].embedding;
    return h("dl", { class: "kv", dataset: { testid: "embedding", dimension: vector.length } },
      h("dt", {}, "dimension"), h("dd", {}, String(vector.length)),
      h("dt", {}, "first values"), h("dd", {}, h("code", {},
        vector.slice(0, EMBEDDING_VALUES_SHOWN).map((v) => v.toFixed(SCORE_DIGITS)).join(", "),
        vector.length > EMBEDDING_VALUES_SHOWN ? ", …" : "")));
  });
}

function rerank(model, signal) {
  const query = h("input", { name: "query", required: true, "aria-label": "Query" });
  const documents = h("textarea", { name: "documents", rows: 4, required: true, "aria-label": "Documents, one per line" }, "");
  return tryForm("rerank", "Rerank", [field("Query", query), field("Documents (one per line)", documents)], "Rerank",
    async (onLoading) => {
      const docs = documents.value.split("\n").map((d) => d.trim()).filter(Boolean);
      const answer = await (await call("/v1/rerank", { model, query: query.value, documents: docs }, onLoading,
        signal)).json();
      return h("ol", { class: "list ranked", dataset: { testid: "ranking" } }, answer.results.map((r) =>
        h("li", { class: "row between", dataset: { index: r.index } }, h("span", {}, docs[r.index]),
          h("code", {}, r.relevance_score.toFixed(SCORE_DIGITS)))));
    });
}

const FORMS = { transcription, tts: speech, image, embeddings, rerank };

// The panel for `model` ({name, capabilities}); `signal` aborts its calls when the page is left, `urls` collects
// the object URLs it made (the page revokes them).
export function tryPanel(model, { signal, urls, onClose }) {
  const caps = model.capabilities || [];
  const forms = TRIED.filter((c) => caps.includes(c)).map((c) => FORMS[c](model.name, signal, urls));
  return h("section", { class: "panel try", dataset: { testid: "try", model: model.name } },
    h("header", { class: "panel-head" }, h("h2", {}, `Try ${model.name}`),
      h("div", { class: "row" },
        caps.includes("chat") ? link(`/app/chat?model=${encodeURIComponent(model.name)}`, "Chat with it") : null,
        h("button", { type: "button", class: "btn ghost small", onclick: onClose }, "Close"))),
    forms.length ? h("div", { class: "grid try-forms" }, forms)
      : h("p", { class: "empty" }, "This model chats: try it on the Chat page."));
}
