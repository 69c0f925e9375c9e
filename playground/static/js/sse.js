// Server-sent events read from a fetch() response (not EventSource, which cannot send the API
// key in a header). Yields the events of each network read as one batch, so the caller can
// save its progress once per read. Follows the HTML standard's parsing: lines end in CRLF, LF
// or CR; ":" starts a comment (the gateway's keep-alives); an event ends at a blank line.

export async function* sseBatches(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data = [];
  let id = null;
  let type = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      const batch = [];
      let position = 0;
      for (;;) {
        const end = lineEnd(buffer, position);
        if (end === null) break;
        const line = buffer.slice(position, end.at);
        position = end.next;
        if (line === "") {
          if (data.length) batch.push({ id, type: type || "message", data: data.join("\n") });
          data = [];
          type = "";
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let text = colon < 0 ? "" : line.slice(colon + 1);
        if (text.startsWith(" ")) text = text.slice(1);
        if (field === "data") data.push(text);
        else if (field === "id" && !text.includes("\0")) id = text;
        else if (field === "event") type = text;
      }
      buffer = buffer.slice(position);
      if (batch.length) yield batch;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

// Where the next line ends, or null if the buffer holds no complete line yet. A CR at the very
// end may be the first half of a CRLF split across two reads: wait for the next read. One regex
// search from `from` stops at the first line end: searching for CR and LF separately scanned the
// rest of the buffer for the one a stream never sends, per line, which made a large read (a
// browser behind the stream gets hundreds of KB at once) cost its size squared.
const LINE_END = /\r\n?|\n/g;

function lineEnd(buffer, from) {
  LINE_END.lastIndex = from;
  const match = LINE_END.exec(buffer);
  if (match === null) return null;
  const next = match.index + match[0].length;
  if (match[0] === "\r" && next >= buffer.length) return null;
  return { at: match.index, next };
}
