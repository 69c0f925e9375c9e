// The chat tab: a conversation with the engine through POST /v1/chat/completions, streamed as a
// resumable session (README "Resumable streams and cancel").
//
// - The page names the session (session_id in the body), so the gateway keeps generating when
//   the connection drops (for CANCEL_AFTER_DISCONNECT_SECONDS) and the answer can be resumed.
// - While it streams, the answer so far and the id of the last event it contains
//   (`<session_id>:<index>`) are saved together, as one value, in sessionStorage: at most every
//   SAVE_EVERY_MS, and at once when the page is hidden or the response ends. A reload
//   resumes with GET /v1/sessions/{id}/events and `Last-Event-ID: <that id>`: the gateway
//   sends exactly the events after it, so no text is repeated or missing.
// - Stop calls POST /v1/cancel/{id}; vLLM aborts the generation and the stream ends with a
//   chunk whose finish_reason is "cancelled", then [DONE]: the answer is marked stopped.
// - A gateway without sessions (SESSION_STORE=off) refuses a session_id: the page then asks
//   without one, Stop closes the connection (the gateway then aborts the generation), and a
//   reload cannot bring the answer back, which the page says.

import { failure, gatewayAddedMs, request, requestJson } from "./api.js";
import { byId, clear, el, setStatus } from "./dom.js";
import { ms, numberField, rate } from "./format.js";
import { sseBatches } from "./sse.js";
import { readJson, writeJson } from "./storage.js";

const STATE_KEY = "stack-playground.chat";  // sessionStorage: this tab's conversation
const SETTINGS_KEY = "stack-playground.chat-settings";  // localStorage: the form's values
const AUTO_RESUMES = 3;  // reconnections after a dropped stream before asking the user
// Saving and drawing once per network read made each read cost the whole answer so far (a JSON
// copy of it into sessionStorage, the text node replaced): a long answer fell seconds behind
// the stream and the page stopped answering clicks. Saves are coalesced to SAVE_EVERY_MS, and
// the text grows every DRAW_EVERY_MS by what arrived since the last time.
const SAVE_EVERY_MS = 250;
const DRAW_EVERY_MS = 50;
// Body fields the page writes itself; the rest can be added as extra fields (vLLM's top_k,
// seed, stop, ignore_eos, ...), which the gateway forwards untouched.
const SESSIONS_OFF = Symbol("the gateway keeps no sessions");
const PAGE_FIELDS = ["model", "messages", "stream", "stream_options", "session_id", "temperature", "max_tokens"];

const endings = {
  completed: null,
  stopped: "stopped",
  failed: "failed",
  interrupted: "interrupted",
};

export function initChat() {
  const form = byId("chat-form");
  const model = byId("chat-model");
  const temperature = byId("chat-temperature");
  const maxTokens = byId("chat-max-tokens");
  const system = byId("chat-system");
  const extra = byId("chat-extra");
  const input = byId("chat-input");
  const transcript = byId("chat-transcript");
  const empty = byId("chat-empty");
  const sendButton = byId("chat-send");
  const stopButton = byId("chat-stop");
  const resumeButton = byId("chat-resume");
  const clearButton = byId("chat-clear");
  const status = byId("chat-status");

  let state = readJson("session", STATE_KEY, null) ?? { messages: [], live: null };
  let reading = false;  // a stream (or a resume) is being read right now
  let leaving = false;  // the page is being unloaded: a broken read is not an error
  let liveText = null;  // the element holding the text of the answer being streamed
  let sessionsOff = false;  // the gateway said it keeps no sessions (SESSION_STORE=off)
  let connection = null;  // AbortController of the response being read
  let shown = 0;  // characters of the live answer already in liveText
  let drawQueued = false;  // a timer will append what arrived
  let saveTimer = null;  // a save is due within SAVE_EVERY_MS

  const saved = readJson("local", SETTINGS_KEY, {});
  if (typeof saved.system === "string") system.value = saved.system;
  if (saved.temperature !== undefined) temperature.value = saved.temperature;
  if (saved.max_tokens !== undefined) maxTokens.value = saved.max_tokens;
  if (typeof saved.extra === "string") extra.value = saved.extra;

  window.addEventListener("pagehide", () => {
    leaving = true;
    save();  // what arrived since the last coalesced save: a reload resumes from there
  });

  function save() {
    clearTimeout(saveTimer);
    saveTimer = null;
    writeJson("session", STATE_KEY, state);
  }

  function saveSoon() {
    saveTimer ??= setTimeout(save, SAVE_EVERY_MS);
  }

  function saveSettings() {
    writeJson("local", SETTINGS_KEY, {
      model: model.value, system: system.value, temperature: temperature.value, max_tokens: maxTokens.value,
      extra: extra.value,
    });
  }

  function updateButtons() {
    const live = state.live;
    sendButton.disabled = reading || Boolean(live);
    // The page names the session itself, so Stop (a cancel by session id) works from the moment
    // the request is sent: also while it waits for its engine (queued, or an engine slow to answer).
    // Without a session, Stop closes the connection, which needs the response to have started.
    stopButton.disabled = !(reading && live && !live.stopping && (live.opened || live.sessionId));
    resumeButton.hidden = !(live && !reading);
    clearButton.disabled = reading;
  }

  // --- rendering ------------------------------------------------------------------------

  function render() {
    clear(transcript);
    liveText = null;
    for (const message of state.messages) transcript.append(messageItem(message));
    if (state.live) {
      const item = messageItem({ role: "assistant", content: state.live.text, live: true });
      liveText = item.querySelector(".text");
      shown = state.live.text.length;
      transcript.append(item);
    }
    empty.hidden = transcript.childElementCount > 0;
    transcript.scrollTop = transcript.scrollHeight;
    updateButtons();
  }

  function messageItem(message) {
    const ending = message.live ? "streaming" : (message.ending ?? "completed");
    const who = el("p", { class: "who", text: message.role === "user" ? "You" : "Assistant" });
    const badge = message.live ? "streaming" : endings[ending];
    if (message.role === "assistant" && badge) who.append(el("span", { class: `badge ${badge}`, text: badge }));
    const item = el("li", {
      class: `msg ${message.role}`,
      dataset: { ending: message.role === "assistant" ? ending : "sent" },
      "aria-busy": message.live ? "true" : null,
    }, [who, el("p", { class: "text", text: message.content })]);
    if (message.error) item.append(el("p", { class: "stats", text: message.error }));
    if (message.stats) item.append(el("p", { class: "stats", text: statsLine(message.stats) }));
    return item;
  }

  function statsLine(stats) {
    const parts = [
      `time to first token ${ms(stats.ttftMs)}`,
      rate(stats.tokensPerSecond),
      stats.tokens === null ? "tokens —" : `${stats.tokens}${stats.tokensExact ? "" : "≈"} tokens`,
      `gateway added ${ms(stats.addedMs)}`,
    ];
    if (stats.finishReason) parts.push(`finish_reason ${stats.finishReason}`);
    if (stats.resumes) parts.push(`resumed ${stats.resumes}×`);
    return parts.join(" · ");
  }

  // --- models ---------------------------------------------------------------------------

  async function loadModels() {
    try {
      const { data } = await requestJson("/v1/models");
      const ids = (data?.data ?? []).map((entry) => entry.id);
      clear(model);
      for (const id of ids) model.append(el("option", { value: id, text: id }));
      if (ids.includes(saved.model)) model.value = saved.model;
      return ids;
    } catch (error) {
      clear(model);
      model.append(el("option", { value: "", text: "(models unavailable)" }));
      setStatus(status, `No model list: ${error.message}`, { error: true });
      throw error;
    }
  }

  // --- sending, reading, stopping -------------------------------------------------------

  function newSessionId() {
    return `pg-${crypto.randomUUID()}`;
  }

  function readForm() {
    const t = numberField(temperature, { label: "Temperature", min: 0, max: 2 });
    if (t.error) return { error: t.error, focus: temperature };
    const m = numberField(maxTokens, { label: "Max tokens", min: 1, max: 32768, integer: true });
    if (m.error) return { error: m.error, focus: maxTokens };
    if (!model.value) return { error: "No model to ask: the gateway listed none (is the engine ready?)", focus: model };
    let fields = {};
    if (extra.value.trim()) {
      try {
        fields = JSON.parse(extra.value);
      } catch (error) {
        return { error: `Extra request fields: not JSON (${error.message})`, focus: extra };
      }
      if (!fields || typeof fields !== "object" || Array.isArray(fields)) {
        return { error: "Extra request fields must be one JSON object, such as {\"top_k\": 20}", focus: extra };
      }
      const taken = Object.keys(fields).filter((name) => PAGE_FIELDS.includes(name));
      if (taken.length) return { error: `Extra request fields: the page sets ${taken.join(", ")} itself`, focus: extra };
    }
    return { temperature: t.value, maxTokens: m.value, fields };
  }

  async function send() {
    if (reading || state.live) return;
    const content = input.value.trim();
    if (!content) {
      setStatus(status, "Type a message first.", { error: true });
      input.focus();
      return;
    }
    const values = readForm();
    if (values.error) {
      setStatus(status, values.error, { error: true });
      values.focus.focus();
      return;
    }
    saveSettings();
    const history = state.messages.filter((m) => m.content).map(({ role, content: text }) => ({ role, content: text }));
    const messages = system.value.trim() ? [{ role: "system", content: system.value.trim() }] : [];
    messages.push(...history, { role: "user", content });
    const sessionId = sessionsOff ? null : newSessionId();
    const body = {
      ...values.fields,
      model: model.value,
      messages,
      stream: true,
      stream_options: { include_usage: true },
      temperature: values.temperature,
      max_tokens: values.maxTokens,
    };
    if (sessionId) body.session_id = sessionId;
    state.messages.push({ role: "user", content });
    state.live = {
      sessionId, lastEventId: null, text: "", startedAt: Date.now(), firstTokenAt: null, lastTokenAt: null,
      chunks: 0, usageTokens: null, finishReason: null, error: null, addedMs: null, resumes: 0, opened: false,
    };
    input.value = "";
    save();
    render();
    setStatus(status, "Waiting for the first token…");
    const post = (signal) => request("/v1/chat/completions", { method: "POST", json: body, signal });
    if ((await follow(post, { first: true })) === SESSIONS_OFF) {
      sessionsOff = true;
      delete body.session_id;
      state.live.sessionId = null;
      save();
      await follow(post, { first: true });
    }
  }

  function resumeRequest(live) {
    const headers = live.lastEventId ? { "Last-Event-ID": live.lastEventId } : {};
    return (signal) => request(`/v1/sessions/${encodeURIComponent(live.sessionId)}/events`, { headers, signal });
  }

  // Read one response of the session's stream into state.live; on a broken read, resume.
  async function follow(open, { first = false, attempt = 0 } = {}) {
    const live = state.live;
    reading = true;
    updateButtons();
    let response;
    connection = new AbortController();
    try {
      response = await open(connection.signal);
    } catch (error) {
      reading = false;
      return leaving ? undefined : refused(error, { first });
    }
    if (response.status === 204) {  // nothing left after the last event we have: it had ended
      reading = false;
      return finish();
    }
    if (!response.ok) {
      reading = false;
      const error = await failure(response);
      if (first && !live.opened && live.sessionId && error.status === 400 && error.field === "session_id"
          && error.message.includes("SESSION_STORE=off")) {
        return SESSIONS_OFF;  // ask again without a session id
      }
      return refused(error, { first });
    }
    if (first) live.addedMs = gatewayAddedMs(response);
    else {
      live.resumes += 1;
      live.stopping = false;  // (a Stop in flight before a reload: this page may stop it again)
    }
    live.opened = true;
    updateButtons();
    let announced = !first;
    if (!first) setStatus(status, "Resumed: following the answer where it was.");
    let done = false;
    try {
      for await (const batch of sseBatches(response)) {
        for (const event of batch) {
          if (apply(live, event)) {
            done = true;
            break;
          }
        }
        saveSoon();
        drawSoon();
        if (live.firstTokenAt && !announced && !live.finishReason) {
          announced = true;  // once: a later message (a refused Stop) must stay readable
          setStatus(status, live.sessionId ? "Streaming…"
            : "Streaming… (this gateway keeps no resumable sessions, SESSION_STORE=off: a reload loses the answer)");
        }
        if (done) break;
      }
    } catch (error) {
      if (leaving) return undefined;
      if (live.stoppedByClosing) {  // no session to cancel: Stop closed the connection
        reading = false;
        live.finishReason = "cancelled";
        return finish();
      }
    }
    reading = false;
    if (done) return finish();
    if (leaving) return undefined;
    save();
    // The stream broke before [DONE] (network, proxy, gateway restart): pick it up again.
    if (attempt < AUTO_RESUMES) {
      setStatus(status, "The stream broke off: resuming…");
      return follow(resumeRequest(live), { attempt: attempt + 1 });
    }
    setStatus(status, "The stream broke off several times. Resume when the gateway is back.", { error: true });
    updateButtons();
    return undefined;
  }

  // A timer, not requestAnimationFrame: frames pause in a hidden tab,
  // and the text would then wait for the end of the answer.
  function drawSoon() {
    if (drawQueued || !liveText) return;
    drawQueued = true;
    setTimeout(() => {
      drawQueued = false;
      const live = state.live;
      if (!liveText || !live || live.text.length <= shown) return;
      const following = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 40;
      liveText.append(live.text.slice(shown));
      shown = live.text.length;
      if (following) transcript.scrollTop = transcript.scrollHeight;  // keep the end in view
    }, DRAW_EVERY_MS);
  }

  // One event into the answer; true at [DONE].
  function apply(live, event) {
    if (event.id) live.lastEventId = event.id;
    if (event.data === "[DONE]") return true;
    let chunk;
    try {
      chunk = JSON.parse(event.data);
    } catch {
      return false;
    }
    if (chunk.error) {
      live.error = chunk.error.message ?? "the stream ended with an error";
      return false;
    }
    for (const choice of chunk.choices ?? []) {
      if (choice.index !== 0) continue;
      const text = choice.delta?.content;
      if (text) {
        const now = Date.now();
        live.firstTokenAt ??= now;
        live.lastTokenAt = now;
        live.text += text;
        live.chunks += 1;
      }
      if (choice.finish_reason) live.finishReason = choice.finish_reason;
    }
    if (chunk.usage && Number.isInteger(chunk.usage.completion_tokens)) live.usageTokens = chunk.usage.completion_tokens;
    return false;
  }

  function finish() {
    const live = state.live;
    const ending = live.error ? "failed" : live.finishReason === "cancelled" ? "stopped" : "completed";
    const tokens = live.usageTokens ?? (live.chunks || null);
    // From sending to the last token, as this browser saw it: includes the time to the first
    // token, and a stream that arrives in bursts (a busy machine) cannot inflate it.
    const seconds = live.lastTokenAt ? (live.lastTokenAt - live.startedAt) / 1000 : 0;
    state.messages.push({
      role: "assistant",
      content: live.text,
      ending,
      error: live.error ? `Error from the gateway: ${live.error}` : null,
      stats: {
        ttftMs: live.firstTokenAt ? live.firstTokenAt - live.startedAt : null,
        tokensPerSecond: tokens && seconds > 0 ? tokens / seconds : null,
        tokens,
        tokensExact: live.usageTokens !== null,
        addedMs: live.addedMs,
        finishReason: live.finishReason,
        resumes: live.resumes,
      },
    });
    state.live = null;
    save();
    render();
    const said = { completed: "Answer complete.", stopped: "Stopped: the generation was cancelled.", failed: "The answer ended with an error." };
    setStatus(status, said[ending], { error: ending === "failed" });
  }

  // The request was refused or never reached the gateway.
  function refused(error, { first }) {
    if (first && !state.live.opened) {
      // Nothing was generated: put the message back in the box, as if it had not been sent.
      const unsent = state.messages.pop();
      input.value = unsent?.content ?? input.value;
      state.live = null;
    } else if (error.status === 404 || error.status === 410) {
      // The gateway no longer has this session's events (restarted on the memory store,
      // expired, or another key's session): keep what was received and say so.
      state.messages.push({
        role: "assistant", content: state.live.text, ending: "interrupted",
        error: `Could not resume: ${error.message}`, stats: null,
      });
      state.live = null;
    }
    save();
    render();
    setStatus(status, error.message, { error: true });
  }

  async function stop() {
    const live = state.live;
    if (!live || live.stopping) return;
    live.stopping = true;
    updateButtons();
    setStatus(status, "Stopping…");
    if (!live.sessionId) {
      live.stoppedByClosing = true;
      connection?.abort();
      return;
    }
    try {
      const { data } = await requestJson(`/v1/cancel/${encodeURIComponent(live.sessionId)}`, { method: "POST" });
      if (!data.cancelled) setStatus(status, `The generation had already ended (${data.status ?? "ended"}).`);
    } catch (error) {
      live.stopping = false;
      setStatus(status, `Stop failed: ${error.message}`, { error: true });
      updateButtons();
    }
  }

  // --- wiring ---------------------------------------------------------------------------

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      send();
    }
  });
  stopButton.addEventListener("click", stop);
  resumeButton.addEventListener("click", () => {
    if (state.live && !reading) follow(resumeRequest(state.live));
  });
  clearButton.addEventListener("click", () => {
    if (reading) return;
    state = { messages: [], live: null };
    save();
    render();
    setStatus(status, "");
    input.focus();
  });
  for (const field of [model, temperature, maxTokens, system, extra]) field.addEventListener("change", saveSettings);

  render();

  return {
    loadModels,
    // After a reload in the middle of a stream: continue it from the last saved event.
    resumeIfLive() {
      if (state.live && !state.live.sessionId && !reading) {
        state.messages.push({
          role: "assistant", content: state.live.text, ending: "interrupted", stats: null,
          error: "This gateway keeps no resumable sessions (SESSION_STORE=off): the answer stopped at the reload.",
        });
        state.live = null;
        save();
        render();
      } else if (state.live && !reading) {
        setStatus(status, "Resuming the answer that was streaming…");
        follow(resumeRequest(state.live));
      }
    },
  };
}
