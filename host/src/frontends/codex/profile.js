// The Codex guest profile: the globals Codex describes to its model
// (codex-rs/code-mode-protocol/src/description.rs), built on quickcell's
// own. The host puts this text, with `__CODEX_TABLE__` replaced by the
// cell's tool table, in front of the cell's source.
const { tools, ALL_TOOLS, image, notify, exit, __codexExit } = ((table) => {
  const exitSignal = Object.freeze({ exit: true });
  const toolObject = {};
  for (const entry of table) {
    const call = globalThis[entry.client];
    toolObject[entry.global] = async (input) => {
      try {
        return await call({ input: input === undefined ? null : input });
      } catch (e) {
        // Codex rejects a failed tool call with its message, a string.
        throw e && typeof e.message === "string" ? e.message : e;
      }
    };
  }
  const stringify = (value) =>
    typeof value === "string" ? value : value === undefined ? "undefined" : JSON.stringify(value) ?? String(value);
  const DETAILS = ["auto", "low", "high", "original"];
  const imageOf = (item, detail) => {
    let url;
    let itemDetail;
    if (typeof item === "string") {
      url = item;
    } else if (item && typeof item === "object" && item.type === "image" && typeof item.data === "string") {
      url = `data:${item.mimeType};base64,${item.data}`;
      itemDetail = item._meta && item._meta["codex/imageDetail"];
    } else if (item && typeof item === "object" && typeof item.image_url === "string") {
      url = item.image_url;
      itemDetail = item.detail;
    } else {
      throw new TypeError("image expects a data: URL, {image_url, detail?} or an MCP image block");
    }
    if (!url.startsWith("data:")) {
      throw new TypeError("image expects a base64 data: URL; remote image URLs are not supported");
    }
    const chosen = detail ?? itemDetail ?? "high";
    if (!DETAILS.includes(chosen)) {
      throw new TypeError(`image detail must be one of ${DETAILS.join(", ")}`);
    }
    json({ "codex:image": { image_url: url, detail: chosen } });
  };
  const notifyClient = globalThis.__codex_notify;
  return {
    tools: Object.freeze(toolObject),
    ALL_TOOLS: Object.freeze(table.map((t) => Object.freeze({ name: t.global, description: t.description }))),
    image: imageOf,
    notify: (value) => {
      const text = stringify(value);
      if (text.trim() === "") throw new TypeError("notify expects non-empty text");
      return notifyClient({ input: text });
    },
    exit: () => {
      throw exitSignal;
    },
    __codexExit: exitSignal,
  };
})(__CODEX_TABLE__);
