// localStorage / sessionStorage that never throw (storage can be disabled or full).

function store(kind) {
  try {
    return kind === "local" ? window.localStorage : window.sessionStorage;
  } catch {
    return null;
  }
}

export function readJson(kind, key, fallback) {
  try {
    const text = store(kind)?.getItem(key);
    return text ? JSON.parse(text) : fallback;
  } catch {
    return fallback;
  }
}

export function writeJson(kind, key, value) {
  try {
    if (value === null || value === undefined) store(kind)?.removeItem(key);
    else store(kind)?.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

export function readText(kind, key) {
  try {
    return store(kind)?.getItem(key) || "";
  } catch {
    return "";
  }
}

export function writeText(kind, key, value) {
  try {
    if (value) store(kind)?.setItem(key, value);
    else store(kind)?.removeItem(key);
    return true;
  } catch {
    return false;
  }
}
