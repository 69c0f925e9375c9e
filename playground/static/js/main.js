// The page's entry point: tabs, the key form, the gateway's status, then each tab.

import { requestJson } from "./api.js";
import { initChat } from "./chat.js";
import { initCode } from "./code.js";
import { byId } from "./dom.js";
import { forgetKey, getKey, saveKey } from "./keys.js";
import { initMarket } from "./market.js";
import { initTabs } from "./tabs.js";

const notice = byId("notice");
const keyPanel = byId("key-panel");
const keyToggle = byId("key-toggle");
const keyForm = byId("key-form");
const keyInput = byId("key-input");
const keyState = byId("key-state");
const gatewayStatus = byId("gateway-status");

function showKeyPanel(open, { focus = false } = {}) {
  keyPanel.hidden = !open;
  keyToggle.setAttribute("aria-expanded", String(open));
  if (open && focus) keyInput.focus();
}

function describeKey() {
  keyState.textContent = getKey()
    ? "A key is saved in this browser."
    : "No key saved: requests go without one (fine when the gateway has no keys).";
}

// One place for refusals: the notice, and the key form on a 401.
document.addEventListener("gateway:refused", (event) => {
  const { status, message } = event.detail;
  notice.textContent = message;
  notice.dataset.status = String(status);
  notice.hidden = false;
  if (status === 401) showKeyPanel(true, { focus: true });
});
document.addEventListener("gateway:accepted", () => {
  notice.hidden = true;
});

async function checkHealth() {
  try {
    const { data } = await requestJson("/health");
    const ready = Boolean(data.ready);
    // Without a (valid) key /health says only whether the engine is ready: no model, no device.
    const details = [data.model_path || "model loaded", data.device].filter(Boolean).join(" · ");
    gatewayStatus.textContent = ready
      ? `Engine ready · ${details}`
      : "Engine not ready yet: answers will fail until it is.";
    gatewayStatus.className = `gateway-status ${ready ? "ready" : "down"}`;
  } catch (error) {
    gatewayStatus.textContent = error.message;
    gatewayStatus.className = "gateway-status down";
  }
}

initTabs(document.querySelector('[role="tablist"]'));
const chat = initChat();
initCode();
initMarket();
describeKey();

// Ask for a key once, when the gateway turns out to need one (and none is saved, or the
// saved one is refused); after that the saved key is used without asking.
async function start() {
  checkHealth();
  try {
    await chat.loadModels();
  } catch {
    // The failure is shown: the notice (401/403/429) or the chat tab's model list.
  }
  chat.resumeIfLive();
}

keyToggle.addEventListener("click", () => showKeyPanel(keyPanel.hidden, { focus: true }));
keyForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = keyInput.value.trim();
  if (!key) {
    keyState.textContent = "Enter a key first.";
    keyInput.focus();
    return;
  }
  saveKey(key);
  keyInput.value = "";
  notice.hidden = true;
  describeKey();
  try {
    await chat.loadModels();
    keyState.textContent = "Key saved in this browser, and the gateway accepted it.";
    showKeyPanel(false);
    chat.resumeIfLive();
  } catch (error) {
    keyState.textContent = `Key saved, but: ${error.message}`;
  }
});
byId("key-forget").addEventListener("click", () => {
  forgetKey();
  describeKey();
  keyInput.focus();
});

start();
