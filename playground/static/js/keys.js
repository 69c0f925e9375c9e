// The API key: kept in localStorage, sent only as "Authorization: Bearer <key>", never in a URL.

import { readText, writeText } from "./storage.js";

const KEY_STORE = "stack-playground.api-key";

export function getKey() {
  return readText("local", KEY_STORE);
}

export function saveKey(key) {
  return writeText("local", KEY_STORE, key.trim());
}

export function forgetKey() {
  writeText("local", KEY_STORE, "");
}
