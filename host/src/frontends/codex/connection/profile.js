// The Codex guest profile: the globals Codex describes to its model
// (codex-rs/code-mode-protocol/src/description.rs), built on quickcell's
// own. The host puts this text in front of the cell's source, with the
// cell's tool table, a marker of its own and the session's stored values
// (`{values: [[key, value], ...], omitted: [key, ...], budget}`, as JSON
// text) in the last line.
const { tools, ALL_TOOLS, text, image, audio, generatedImage, notify, store, load, exit, __codexExit, setTimeout, clearTimeout, __codexEnd } = ((table, marker, storedJson) => {
  const exitSignal = Object.freeze({ exit: true });
  // Codex's timers do not keep a cell alive: those still pending when the
  // source ends are cleared (quickcell's would hold the cell open).
  const realSetTimeout = globalThis.setTimeout;
  const realClearTimeout = globalThis.clearTimeout;
  const pendingTimers = new Set();
  const setTimeoutCodex = (callback, delayMs, ...args) => {
    const delay = Number.isFinite(delayMs) && delayMs > 0 ? delayMs : 0;
    const id = realSetTimeout(() => {
      pendingTimers.delete(id);
      callback(...args);
    }, delay);
    pendingTimers.add(id);
    return id;
  };
  const clearTimeoutCodex = (id) => {
    pendingTimers.delete(id);
    realClearTimeout(id);
  };
  const toolObject = {};
  // Nested tool calls not settled yet: those nobody awaited when the
  // source ends are discarded, as in Codex.
  let inFlight = 0;
  const dispatch = globalThis.__codex_call;
  for (const entry of table) {
    const index = entry.index;
    toolObject[entry.global] = async (input) => {
      inFlight += 1;
      try {
        return await dispatch({ tool: index, input: input === undefined ? null : input });
      } catch (e) {
        // Codex rejects a failed tool call with its message, a string.
        throw e && typeof e.message === "string" ? e.message : e;
      } finally {
        inFlight -= 1;
      }
    };
  }
  const endClient = globalThis.__codex_end;
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
    json({ [marker]: { type: "image", image_url: url, detail: chosen } });
  };
  const audioOf = (item) => {
    let url;
    if (typeof item === "string") {
      url = item;
    } else if (item && typeof item === "object" && item.type === "audio" && typeof item.data === "string") {
      url = `data:${item.mimeType};base64,${item.data}`;
    } else if (item && typeof item === "object" && typeof item.audio_url === "string") {
      url = item.audio_url;
    } else {
      throw new TypeError("audio expects a data: URL, {audio_url} or an MCP audio block");
    }
    if (!url.startsWith("data:")) {
      throw new TypeError("audio expects a base64 data: URL; remote URLs are not supported");
    }
    json({ [marker]: { type: "audio", audio_url: url } });
  };
  const quickcellText = globalThis.text;
  const notifyClient = globalThis.__codex_notify;
  // Codex's `load` is synchronous: the session's values, as they were
  // when the cell started, and the cell's own writes, kept as JSON text
  // (each `load` returns a fresh copy). quickcell's `store` commits them
  // when the cell completes; a write it refuses fails the cell at its end.
  const quickcellStore = globalThis.store;
  // At most `budget` characters of the session's values (keys and JSON)
  // load synchronously: the host hands over those, sorted by key, and
  // names the others (`omitted`), which `load` refuses.
  const session = JSON.parse(storedJson);
  const stored = new Map(session.values.map(([key, value]) => [key, JSON.stringify(value)]));
  const omitted = new Set(session.omitted);
  const budget = session.budget;
  let storedSize = 0;
  for (const [key, json] of stored) storedSize += key.length + json.length;
  let storeError;
  // Writes quickcell has not answered yet: the end waits for them.
  let storesPending = 0;
  let storesDone;
  const storeSettled = () => {
    storesPending -= 1;
    if (storesPending === 0 && storesDone !== undefined) storesDone();
  };
  const checkKey = (what, key) => {
    if (typeof key !== "string" || key.length < 1 || key.length > 256) {
      throw new TypeError(`${what} keys must be strings of 1 to 256 characters`);
    }
  };
  const storeCodex = (key, value) => {
    checkKey("store", key);
    const json = value === undefined ? undefined : JSON.stringify(value);
    if (value !== undefined && json === undefined) {
      throw new TypeError("store value must be serializable");
    }
    const before = stored.has(key) ? key.length + stored.get(key).length : 0;
    const after = json === undefined ? 0 : key.length + json.length;
    if (storedSize - before + after > budget) {
      throw new RangeError(
        `store: the session's values would be ${storedSize - before + after} characters of JSON; at most ${budget} load synchronously. Nothing was stored.`,
      );
    }
    const pending = quickcellStore(key, value === undefined ? undefined : JSON.parse(json));
    storesPending += 1;
    pending.then(storeSettled, (e) => {
      storeError ??= e;
      storeSettled();
    });
    storedSize += after - before;
    omitted.delete(key);
    if (json === undefined) stored.delete(key);
    else stored.set(key, json);
  };
  const loadCodex = (key) => {
    checkKey("load", key);
    if (omitted.has(key)) {
      throw new RangeError(
        `load: the stored value ${JSON.stringify(key)} is past the ${budget} characters of a session's values that load synchronously; delete it with store(key, undefined)`,
      );
    }
    const json = stored.get(key);
    return json === undefined ? undefined : JSON.parse(json);
  };
  return {
    tools: Object.freeze(toolObject),
    ALL_TOOLS: Object.freeze(table.map((t) => Object.freeze({ name: t.global, description: t.description }))),
    // Codex writes `undefined` as "undefined".
    text: (value) => quickcellText(value === undefined ? "undefined" : value),
    image: imageOf,
    audio: audioOf,
    generatedImage: (result) => {
      if (!result || typeof result !== "object" || typeof result.image_url !== "string") {
        throw new TypeError("generatedImage expects {image_url, output_hint?}");
      }
      imageOf(result.image_url);
      if (typeof result.output_hint === "string") quickcellText(result.output_hint);
    },
    notify: (value) => {
      const text = stringify(value);
      if (text.trim() === "") throw new TypeError("notify expects non-empty text");
      return notifyClient({ input: text });
    },
    store: storeCodex,
    load: loadCodex,
    exit: () => {
      throw exitSignal;
    },
    __codexExit: exitSignal,
    setTimeout: setTimeoutCodex,
    clearTimeout: clearTimeoutCodex,
    __codexEnd: async () => {
      for (const id of pendingTimers) realClearTimeout(id);
      pendingTimers.clear();
      // Tells the host that the calls still pending are nobody's.
      if (inFlight > 0) endClient({ input: null });
      if (storesPending > 0) {
        await new Promise((resolve) => {
          storesDone = resolve;
        });
      }
      if (storeError !== undefined) throw storeError;
    },
  };
})(
