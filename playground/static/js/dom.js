// Building elements without HTML strings: the page's CSP requires Trusted Types with no
// policy, so innerHTML cannot be used at all, and text always lands in textContent.

export function el(tag, options = {}, children = []) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(options)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name === "on") for (const [type, handler] of Object.entries(value)) node.addEventListener(type, handler);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of [].concat(children)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
}

export function byId(id) {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the page has no #${id}`);
  return node;
}

export function setStatus(node, text, { error = false } = {}) {
  node.textContent = text;
  node.classList.toggle("error", error);
}
