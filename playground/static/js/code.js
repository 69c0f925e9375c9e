// The code tab: the Stack 2.9 /generate request and what it returns.
//
// The engine is asked once, through POST /generate/raw (the text exactly as generated); the
// code is then taken from that same text by POST /extract-code, the function /generate itself
// applies (gateway/codegen/extract.py). So the extracted code and the raw text beside it are
// always the same answer: calling /generate and /generate/raw separately would show two
// different samples whenever sampling is on.

import { failure, gatewayAddedMs, request, requestJson } from "./api.js";
import { byId, clear, el, setStatus } from "./dom.js";
import { ms, numberField } from "./format.js";

export function initCode() {
  const form = byId("code-form");
  const prompt = byId("code-prompt");
  const maxTokens = byId("code-max-tokens");
  const temperature = byId("code-temperature");
  const topP = byId("code-top-p");
  const penalty = byId("code-repetition-penalty");
  const sequences = byId("code-sequences");
  const language = byId("code-language");
  const doSample = byId("code-do-sample");
  const allBlocks = byId("code-all-blocks");
  const button = byId("code-generate");
  const status = byId("code-status");
  const results = byId("code-results");
  const requestView = byId("code-request");

  function readForm() {
    if (!prompt.value.trim()) return { error: "prompt must not be empty", focus: prompt };
    const fields = [
      ["max_tokens", maxTokens, { min: 1, max: 4096, integer: true }],
      ["temperature", temperature, { min: 0, max: 2 }],
      ["top_p", topP, { min: 0, max: 1 }],
      ["repetition_penalty", penalty, { min: 1, max: 2 }],
      ["num_return_sequences", sequences, { min: 1, max: 10, integer: true }],
    ];
    const body = { prompt: prompt.value };
    for (const [name, input, limits] of fields) {
      const read = numberField(input, { label: name, ...limits });
      if (read.error) return { error: read.error, focus: input };
      body[name] = read.value;
    }
    body.do_sample = doSample.checked;
    body.language = language.value || null;
    body.all_blocks = allBlocks.checked;
    return { body };
  }

  async function generate() {
    const read = readForm();
    if (read.error) {
      setStatus(status, read.error, { error: true });
      read.focus.focus();
      return;
    }
    const { body } = read;
    requestView.textContent = JSON.stringify(body, null, 2);
    button.disabled = true;
    setStatus(status, "Generating…");
    try {
      const response = await request("/generate/raw", { method: "POST", json: body });
      if (!response.ok) throw await failure(response);
      const answer = await response.json();
      const added = gatewayAddedMs(response);
      const texts = answer.generated_texts?.length ? answer.generated_texts : [answer.generated_text];
      const codes = await Promise.all(texts.map((text) => extract(text, body)));
      show(answer, texts, codes, added);
      setStatus(status, "Done.");
    } catch (error) {
      setStatus(status, error.message, { error: true });
    } finally {
      button.disabled = false;
    }
  }

  async function extract(text, body) {
    const { data } = await requestJson("/extract-code", {
      method: "POST", json: { prompt: text, language: body.language, all_blocks: body.all_blocks },
    });
    return data.code;
  }

  function show(answer, texts, codes, added) {
    clear(results);
    results.append(el("p", { class: "meta", id: "code-meta" }, [
      `finish_reason ${answer.finish_reason} · ${answer.num_tokens} tokens · model ${answer.model}`,
      ` · gateway added ${ms(added)}`,
    ]));
    texts.forEach((text, index) => {
      const title = texts.length > 1 ? `Sequence ${index + 1} of ${texts.length}` : null;
      const extractedId = `code-extracted-${index}`;
      const rawId = `code-raw-${index}`;
      const copyStatus = el("span", { class: "hint", role: "status" });
      const copy = el("button", {
        type: "button", class: "secondary", text: "Copy code", "aria-describedby": extractedId,
        on: { click: () => copyCode(codes[index], byId(extractedId), copyStatus) },
      });
      results.append(el("section", { class: "sequence", "aria-label": title ?? "Generated code" }, [
        title ? el("h3", { text: title }) : null,
        el("div", { class: "code-box" }, [
          el("header", {}, [el("h4", { text: "Extracted code" }), copyStatus, copy]),
          el("pre", { class: "mono", tabindex: "0", "aria-label": "Extracted code" }, [
            el("code", { id: extractedId, class: "extracted", text: codes[index] }),
          ]),
        ]),
        el("div", { class: "code-box" }, [
          el("header", {}, [el("h4", { text: "Raw text (/generate/raw)" })]),
          el("pre", { class: "mono raw", id: rawId, tabindex: "0", "aria-label": "Raw text", text: text }),
        ]),
      ]));
    });
  }

  async function copyCode(code, node, copyStatus) {
    try {
      await navigator.clipboard.writeText(code);
      copyStatus.textContent = "Copied.";
    } catch {
      // No clipboard permission: select the code so Ctrl+C copies it.
      const range = document.createRange();
      range.selectNodeContents(node);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      copyStatus.textContent = "Selected: press Ctrl+C to copy.";
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    generate();
  });
  prompt.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      generate();
    }
  });
}
