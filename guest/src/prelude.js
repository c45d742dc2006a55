// quickcell guest prelude.
//
// Evaluated once, at pre-initialization, as a strict global script whose
// completion value is the installer below. The installer receives the native
// host functions, installs the guest globals (`text`, `json`, `console`) and
// returns the runner object that the Rust side of the guest drives. The native
// functions and the runner are reachable only through closures: user code
// cannot see them (`typeof __quickcell...` is "undefined").
//
// Every intrinsic the prelude relies on is captured here, before user code
// runs, so a cell that overwrites `JSON.stringify` or `Array.prototype.push`
// cannot change how its results are projected or reported.
(function install(native) {
  "use strict";

  const G = globalThis;
  const ReflectApply = Reflect.apply;
  const ownKeys = Reflect.ownKeys;
  const getOwnPropertyDescriptor = Object.getOwnPropertyDescriptor;
  const getPrototypeOf = Object.getPrototypeOf;
  const defineProperty = Object.defineProperty;
  const freeze = Object.freeze;
  const JSONStringify = JSON.stringify;
  // JSON text of plain data, written in Rust (a tenth of the fuel of
  // JSON.stringify); anything else goes to JSON.stringify. Every value the
  // prelude stringifies is plain: the safe projection's output or its own
  // request objects.
  const stringifyNative = native.stringify;
  const stringify = (value) => {
    const text = stringifyNative(value);
    return text !== undefined ? text : JSONStringify(value);
  };
  const isArray = Array.isArray;
  const StringCtor = String;
  const NumberIsFinite = Number.isFinite;
  const MathFloor = Math.floor;
  const SetCtor = Set;
  // `uncurry(fn)(self, a, b)` calls `fn` with `this = self`. A bound
  // `Function.prototype.call` passes the arguments straight through; a
  // `(self, ...args) => Reflect.apply(fn, self, args)` wrapper would build
  // two arrays per call, which made up a large part of a tool call's cost.
  const functionCall = Function.prototype.call;
  const bind = Function.prototype.bind;
  const uncurry = (fn) => ReflectApply(bind, functionCall, [fn]);
  const setHas = uncurry(Set.prototype.has);
  const setAdd = uncurry(Set.prototype.add);
  const setDelete = uncurry(Set.prototype.delete);
  const arrayPush = uncurry(Array.prototype.push);
  const arrayJoin = uncurry(Array.prototype.join);
  const stringSlice = uncurry(String.prototype.slice);
  const stringCharCodeAt = uncurry(String.prototype.charCodeAt);
  const stringSplit = uncurry(String.prototype.split);
  const regexpExec = uncurry(RegExp.prototype.exec);
  const promiseThen = uncurry(Promise.prototype.then);
  const dateToISOString = uncurry(Date.prototype.toISOString);
  const bigintToString = uncurry(BigInt.prototype.toString);
  const errorProto = Error.prototype;
  const dateProto = Date.prototype;
  const TypedArrayProto = getPrototypeOf(Uint8Array.prototype);
  const typedArrayLength = uncurry(
    getOwnPropertyDescriptor(TypedArrayProto, "length").get,
  );
  const typedArrayTag = uncurry(
    getOwnPropertyDescriptor(TypedArrayProto, Symbol.toStringTag).get,
  );
  const ReferenceErrorProto = ReferenceError.prototype;
  const InternalErrorProto = G.InternalError ? G.InternalError.prototype : null;
  const emitNative = native.emit;
  const emitTextNative = native.emitText;
  // Lone surrogates leave as `\udXXX` escapes (the native writes them).
  const emitText = emitTextNative;
  const isPromise = native.isPromise;
  const isProxy = native.isProxy;

  const UNAWAITED =
    "[Unawaited Promise: use await or Promise.all(...) before emitting or returning values.]";
  // Nesting depth at which the projection stops descending; deeper values
  // become this marker instead of overflowing the stack.
  // 100 keeps the host's JSON (result and output wrappers included) under
  // serde_json's nesting limit of 128.
  const MAX_PROJECTION_DEPTH = 100;
  const DEPTH_MARKER = "[Depth limit]";

  // ---------------------------------------------------------------------
  // Small helpers that never run user code (no getters, no toJSON).

  function hasProto(value, proto) {
    // Walks the prototype chain; a Proxy's getPrototypeOf trap may run
    // (detection only), and callers catch what it throws.
    let p = getPrototypeOf(value);
    for (let i = 0; p !== null && i < 10000; i++) {
      if (p === proto) return true;
      p = getPrototypeOf(p);
    }
    return false;
  }

  // Reads a data property along the prototype chain without invoking
  // getters; returns undefined for accessors.
  // QuickJS-ng keeps an Error's stack in the error itself, behind this
  // accessor of Error.prototype (a native getter that runs no user code).
  const errorStackGetter = getOwnPropertyDescriptor(errorProto, "stack")?.get;

  // An error's `stack`: an own or inherited data property, or what the
  // intrinsic accessor holds; never a user getter.
  function errorStack(error) {
    let o = error;
    for (let i = 0; o !== null && i < 10000; i++) {
      const d = getOwnPropertyDescriptor(o, "stack");
      if (d !== undefined) {
        if ("value" in d) return d.value;
        return d.get !== undefined && d.get === errorStackGetter
          ? ReflectApply(errorStackGetter, error, [])
          : undefined;
      }
      o = getPrototypeOf(o);
    }
    return undefined;
  }

  function dataProp(value, key) {
    let o = value;
    for (let i = 0; o !== null && i < 10000; i++) {
      const d = getOwnPropertyDescriptor(o, key);
      if (d !== undefined) return "value" in d ? d.value : undefined;
      o = getPrototypeOf(o);
    }
    return undefined;
  }

  function isTypedArray(value) {
    try {
      return typedArrayTag(value) !== undefined;
    } catch (_) {
      return false;
    }
  }

  // ---------------------------------------------------------------------
  // Safe projection (contract §8.7): own enumerable data properties only,
  // no getters, no toJSON; cycles → "[Circular]", BigInt → decimal string,
  // Date → ISO string (invalid → null), typed arrays → number arrays,
  // Promise → the unawaited-promise text, Error → {name, message, ...own}.

  function project(value, stack, depth) {
    switch (typeof value) {
      case "string":
      case "boolean":
        return value;
      case "number":
        return NumberIsFinite(value) ? value : null;
      case "bigint":
        return bigintToString(value);
      case "function": {
        const meta = handleMetadata(value);
        return meta === undefined ? undefined : project(meta, stack, depth);
      }
      case "undefined":
      case "symbol":
        return undefined;
    }
    if (value === null) return null;
    if (isPromise(value)) return UNAWAITED;
    if (setHas(stack, value)) return "[Circular]";
    if (depth >= MAX_PROJECTION_DEPTH) return DEPTH_MARKER;
    setAdd(stack, value);
    try {
      if (!isProxy(value)) {
        if (hasProto(value, dateProto)) {
          try {
            return dateToISOString(value);
          } catch (_) {
            return null;
          }
        }
        if (isTypedArray(value)) {
          const n = typedArrayLength(value);
          const out = [];
          for (let i = 0; i < n; i++) arrayPush(out, project(value[i], stack, depth + 1));
          return out;
        }
      }
      if (isArray(value)) {
        const lengthDesc = getOwnPropertyDescriptor(value, "length");
        const n = lengthDesc && "value" in lengthDesc ? lengthDesc.value : 0;
        const out = [];
        for (let i = 0; i < n; i++) {
          const d = getOwnPropertyDescriptor(value, StringCtor(i));
          const item = d !== undefined && "value" in d ? project(d.value, stack, depth + 1) : undefined;
          arrayPush(out, item === undefined ? null : item);
        }
        return out;
      }
      const out = {};
      if (hasProto(value, errorProto)) {
        const name = dataProp(value, "name");
        const message = dataProp(value, "message");
        defineData(out, "name", typeof name === "string" ? name : "Error");
        defineData(out, "message", typeof message === "string" ? message : "");
      }
      const keys = ownKeys(value);
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (typeof key !== "string") continue;
        const d = getOwnPropertyDescriptor(value, key);
        if (d === undefined || !d.enumerable || !("value" in d)) continue;
        if (key === "stack" && hasProto(value, errorProto)) continue;
        const p = project(d.value, stack, depth + 1);
        if (p !== undefined) defineData(out, key, p);
      }
      return out;
    } catch (_) {
      return "[Unserializable]";
    } finally {
      setDelete(stack, value);
    }
  }

  function defineData(target, key, value) {
    defineProperty(target, key, { value, enumerable: true, writable: true, configurable: true });
  }

  function projectValue(value) {
    return project(value, new SetCtor(), 0);
  }

  // The projection's JSON text ("null" for undefined). The Rust walker
  // (`guest/src/project.rs`) writes it directly; values it hands back
  // (functions, proxies, typed arrays) are projected here.
  const projectJsonNative = native.projectJson;
  native.projectionIntrinsics(dateProto, errorProto, Date.prototype.toISOString, UNAWAITED);

  function projectedJson(value) {
    const text = projectJsonNative(value);
    if (typeof text === "string") return text;
    if (text === undefined) return "null";
    const p = projectValue(value);
    return p === undefined ? "null" : stringify(p);
  }

  // ---------------------------------------------------------------------
  // Output helpers (contract §8.5).

  function emit(entry) {
    emitNative(stringify(entry));
  }

  function text(value) {
    emitText(typeof value === "string" ? value : projectedJson(value));
  }

  function json(value) {
    emitNative('{"type":"json","value":' + projectedJson(value) + "}");
  }

  // ---------------------------------------------------------------------
  // Console: bounded inspection and the cumulative per-cell cap.

  const CONSOLE_CAP_UNITS = 16384;
  const CONSOLE_CAP_RESERVE = 100;
  const CONSOLE_MAX_VALUES = 100;
  const CONSOLE_MAX_PROPS = 50;
  const CONSOLE_MAX_DEPTH = 4;
  const CONSOLE_MAX_STRING = 512;
  const CONSOLE_MAX_MESSAGE = 4096;
  const TRUNCATED_SUFFIX = "…[truncated]";
  let consoleUnits = 0;
  let consoleClosed = false;

  // Cuts a string to at most `max` UTF-16 code units without splitting a
  // surrogate pair, appending the truncation suffix when it cut.
  function cutUnits(s, max) {
    if (s.length <= max) return s;
    let end = max;
    const c = stringCharCodeAt(s, end - 1);
    if (c >= 0xd800 && c <= 0xdbff) end -= 1;
    return stringSlice(s, 0, end) + TRUNCATED_SUFFIX;
  }

  function inspectKey(key) {
    const k = cutUnits(key, CONSOLE_MAX_STRING);
    return regexpExec(/^[A-Za-z_$][A-Za-z0-9_$]*$/, k) !== null ? k : stringify(k);
  }

  function inspect(value, state, depth, top) {
    if (state.visited >= CONSOLE_MAX_VALUES) return "…";
    state.visited++;
    switch (typeof value) {
      case "string": {
        const s = cutUnits(value, CONSOLE_MAX_STRING);
        return top ? s : stringify(s);
      }
      case "number":
      case "boolean":
        return StringCtor(value);
      case "bigint":
        return bigintToString(value) + "n";
      case "undefined":
        return "undefined";
      case "symbol":
        return "[Symbol]";
      case "function":
        return "[Function]";
    }
    if (value === null) return "null";
    if (isPromise(value)) return UNAWAITED;
    if (setHas(state.stack, value)) return "[Circular]";
    setAdd(state.stack, value);
    try {
      if (!isProxy(value) && hasProto(value, dateProto)) {
        try {
          return dateToISOString(value);
        } catch (_) {
          return "Invalid Date";
        }
      }
      const array = isArray(value);
      if (depth >= CONSOLE_MAX_DEPTH) return array ? "[Array]" : "[Object]";
      const parts = [];
      let prefix = "";
      if (!array && hasProto(value, errorProto)) {
        const name = dataProp(value, "name");
        const message = dataProp(value, "message");
        prefix =
          (typeof name === "string" ? name : "Error") +
          ": " +
          cutUnits(typeof message === "string" ? message : "", CONSOLE_MAX_STRING);
      }
      const keys = ownKeys(value);
      let shown = 0;
      for (let i = 0; i < keys.length; i++) {
        const key = keys[i];
        if (typeof key !== "string") continue;
        if (array && key === "length") continue;
        const d = getOwnPropertyDescriptor(value, key);
        if (d === undefined || !d.enumerable) continue;
        if (prefix !== "" && (key === "stack" || key === "message")) continue;
        if (shown >= CONSOLE_MAX_PROPS || state.visited >= CONSOLE_MAX_VALUES) {
          arrayPush(parts, "…");
          break;
        }
        shown++;
        const rendered = "value" in d ? inspect(d.value, state, depth + 1, false) : "[Accessor]";
        arrayPush(parts, array ? rendered : inspectKey(key) + ":" + rendered);
      }
      if (array) return "[" + arrayJoin(parts, ",") + "]";
      if (prefix !== "") return parts.length ? prefix + " {" + arrayJoin(parts, ",") + "}" : prefix;
      return "{" + arrayJoin(parts, ",") + "}";
    } catch (_) {
      return "[Unserializable]";
    } finally {
      setDelete(state.stack, value);
    }
  }

  function consoleMethod(level) {
    const label = level === "log" ? "" : "[" + level + "] ";
    return function () {
      if (consoleClosed) return undefined;
      const parts = [];
      for (let i = 0; i < arguments.length; i++) {
        const state = { visited: 0, stack: new SetCtor() };
        arrayPush(parts, inspect(arguments[i], state, 0, true));
      }
      let message = label + arrayJoin(parts, " ");
      if (message.length > CONSOLE_MAX_MESSAGE) message = cutUnits(message, CONSOLE_MAX_MESSAGE);
      // Size of the entry's JSON: {"type":"text","text":<message>}.
      const units = 23 + stringify(message).length;
      if (consoleUnits + units > CONSOLE_CAP_UNITS - CONSOLE_CAP_RESERVE) {
        consoleClosed = true;
        emitText("[console output truncated]");
        return undefined;
      }
      consoleUnits += units;
      emitText(message);
      return undefined;
    };
  }

  const consoleObject = {};
  const levels = ["log", "info", "warn", "error", "debug"];
  for (let i = 0; i < levels.length; i++) {
    defineData(consoleObject, levels[i], consoleMethod(levels[i]));
  }

  function installGlobal(name, value) {
    defineProperty(G, name, { value, enumerable: false, writable: true, configurable: true });
  }

  installGlobal("text", text);
  installGlobal("json", json);
  installGlobal("console", consoleObject);
  // Names that must not exist in a cell (contract §8).
  const absent = ["require", "process", "module", "tools", "ALL_TOOLS", "Javy"];
  for (let i = 0; i < absent.length; i++) delete G[absent[i]];


  // ---------------------------------------------------------------------
  // The bridge: requests to the host, settled later by `runner.settle`.

  // `native.request(method, argsJson)` queues a request with the host and
  // returns its promise; the Rust side keeps the resolving functions and
  // settles them (see `settle` in lib.rs), so a round trip runs no prelude
  // code.
  const requestNative = native.request;
  const cancelNative = native.cancel;
  const JSONParse = JSON.parse;
  const MapCtor = Map;
  const WeakMapCtor = WeakMap;
  const mapGet = uncurry(Map.prototype.get);
  const mapSet = uncurry(Map.prototype.set);
  const mapHas = uncurry(Map.prototype.has);
  const mapDelete = uncurry(Map.prototype.delete);
  const weakMapGet = uncurry(WeakMap.prototype.get);
  const weakMapSet = uncurry(WeakMap.prototype.set);
  const PromiseCtor = Promise;
  const ErrorCtor = Error;
  const TypeErrorCtor = TypeError;
  const RangeErrorCtor = RangeError;
  const lastRequestId = native.lastRequestId;
  const callToolNative = native.callTool;
  const isPendingNative = native.isPending;

  function hostRequest(method, args) {
    return requestNative(method, stringify(args));
  }


  function bridgeError(error) {
    if (error === null || typeof error !== "object") error = {};
    const message = typeof error.message === "string" ? error.message : "tool failed";
    // Session-store limits and key rules surface as the standard classes.
    const Ctor =
      error.code === "store_range" ? RangeErrorCtor : error.code === "store_type" ? TypeErrorCtor : ErrorCtor;
    const e = new Ctor(message);
    if (typeof error.code === "string") defineData(e, "code", error.code);
    defineData(e, "effectStatus", "unknown");
    return e;
  }

  // Handles: callable functions carrying their metadata (contract §8.3).
  // Metadata arrives as JSON text (`start`'s third argument, held on the
  // Rust side until `native.toolMetas` hands it over) and is parsed only
  // when a cell first looks at it (parsing it eagerly would cost every cell
  // ~100 fuel per byte).
  // Metadata fields are getters on a shared prototype, so creating a handle
  // is one function and one prototype switch.
  const handleMeta = new WeakMapCtor(); // handle -> callable name
  const handlesByName = new MapCtor(); // callableName -> handle
  const metaByName = new MapCtor(); // callableName -> frozen metadata
  let metasParsed = false;
  const toolMetasNative = native.toolMetas;
  let allHandles = null;
  const setPrototypeOf = Object.setPrototypeOf;
  const AsyncFunctionProto = getPrototypeOf(async function () {});
  const META_FIELDS = ["callableName", "toolName", "label", "description", "source", "apiPath", "input", "output"];

  function rememberMeta(meta) {
    if (!mapHas(metaByName, meta.callableName)) mapSet(metaByName, meta.callableName, freeze(meta));
  }

  function metaOf(callable) {
    if (!metasParsed) {
      metasParsed = true;
      const text = toolMetasNative();
      const metas = text === "" ? [] : JSONParse(text);
      for (let i = 0; i < metas.length; i++) rememberMeta(metas[i]);
    }
    return mapGet(metaByName, callable);
  }

  const HandleProto = { __proto__: AsyncFunctionProto };
  for (let i = 0; i < META_FIELDS.length; i++) {
    const field = META_FIELDS[i];
    defineProperty(HandleProto, field, {
      get() {
        const name = weakMapGet(handleMeta, this);
        const meta = name === undefined ? undefined : metaOf(name);
        return meta === undefined ? undefined : meta[field];
      },
    });
  }
  defineProperty(HandleProto, "describe", {
    value() {
      return hostRequest("describe", { callable: weakMapGet(handleMeta, this) });
    },
  });
  defineProperty(HandleProto, "toJSON", {
    value() {
      return metaOf(weakMapGet(handleMeta, this));
    },
  });
  freeze(HandleProto);

  function makeHandle(callable) {
    if (mapHas(handlesByName, callable)) return mapGet(handlesByName, callable);
    const prefix = '{"callable":' + stringify(callable) + ',"input":';
    // A plain function returning the request's promise: an async wrapper
    // would add a second promise and two extra job-queue turns per call.
    const handle = function (input) {
      const promise = callToolNative(prefix, input);
      if (promise !== undefined) return promise;
      let args;
      try {
        args = input === undefined ? "null" : projectedJson(input);
      } catch (e) {
        return new PromiseCtor((_, reject) => reject(e));
      }
      return requestNative("callValue", prefix + args + "}");
    };
    setPrototypeOf(handle, HandleProto);
    defineProperty(handle, "name", { value: callable });
    freeze(handle);
    weakMapSet(handleMeta, handle, callable);
    mapSet(handlesByName, callable, handle);
    return handle;
  }

  // The metadata a projection or console shows for a handle (or undefined
  // when `value` is not a handle).
  function handleMetadata(value) {
    const name = weakMapGet(handleMeta, value);
    return name === undefined ? undefined : metaOf(name);
  }

  const catalogObject = freeze({
    search(query, options) {
      const limit = options !== null && typeof options === "object" ? options.limit : undefined;
      return promiseThen(
        hostRequest("search", { query: StringCtor(query), limit: limit === undefined ? null : limit }),
        (metas) => {
          const out = [];
          for (let i = 0; i < metas.length; i++) {
            rememberMeta(metas[i]);
            arrayPush(out, makeHandle(metas[i].callableName));
          }
          return freeze(out);
        },
      );
    },
    all() {
      return listAllHandles();
    },
  });

  // Tool globals are defined by the Rust side (`install_tool_globals`) as
  // accessors that call this on first touch: reading one makes its handle,
  // assigning one stores the value; either way the global becomes the plain
  // data property it would have been. A cell pays for the handles it uses.
  function materializeTool(name, value) {
    const v = arguments.length > 1 ? value : makeHandle(name);
    try {
      installGlobal(name, v);
    } catch (_) {
      // A frozen global object keeps the accessor, which still answers.
    }
    return v;
  }

  // `namesText`: callable names joined by newlines, sorted (the host's
  // projection order); the handles of `catalog.all()` are made on its first
  // call.
  let unlistedNames = "";
  function installTools(namesText) {
    unlistedNames = namesText;
    allHandles = null;
  }

  function listAllHandles() {
    if (allHandles === null) {
      const names = unlistedNames === "" ? [] : stringSplit(unlistedNames, "\n");
      const handles = [];
      for (let i = 0; i < names.length; i++) arrayPush(handles, makeHandle(names[i]));
      allHandles = freeze(handles);
    }
    return allHandles;
  }

  // The `MCP` namespace (contract §8.4): `MCP.<server>.<tool>(args)` takes
  // one object argument and resolves to the MCP result; `$api(method?,
  // { schema: true })` returns declarations and input schemas. `layout`
  // lists, per server, its identifier followed by its tools' identifiers.
  function mcpMethod(server, tool) {
    const callable = "MCP." + server + "." + tool;
    const prefix = '{"callable":' + stringify(callable) + ',"input":';
    return function (args) {
      if (args !== undefined && (args === null || typeof args !== "object" || isArray(args))) {
        return new PromiseCtor((_, reject) =>
          reject(new TypeErrorCtor(callable + " takes one object argument")),
        );
      }
      let text;
      try {
        text = args === undefined ? "{}" : projectedJson(args);
      } catch (e) {
        return new PromiseCtor((_, reject) => reject(e));
      }
      return requestNative("callValue", prefix + text + "}");
    };
  }

  // Without MCP servers the empty namespace installed at initialization
  // (part of the pre-initialized image, so free for every cell) stays.
  function mcpNamespace(server, toolsText) {
    const ns = {};
    const tools = toolsText === "" ? [] : stringSplit(toolsText, "\n");
    for (let j = 0; j < tools.length; j++) {
      defineData(ns, tools[j], mcpMethod(server, tools[j]));
    }
    defineData(ns, "$api", function (method, options) {
      const schema = options !== null && typeof options === "object" && options.schema === true;
      return hostRequest("mcpApi", {
        server,
        method: method === undefined || method === null ? null : StringCtor(method),
        schema,
      });
    });
    return freeze(ns);
  }

  // Each server's namespace is built on first access, so a cell pays for
  // the servers it uses, not for every tool of every server.
  function installMcp(layout) {
    if (layout.length === 0) return;
    const mcp = {};
    for (let i = 0; i < layout.length; i++) {
      const server = layout[i][0];
      const toolsText = layout[i][1];
      let ns = null;
      defineProperty(mcp, server, {
        enumerable: true,
        get() {
          if (ns === null) ns = mcpNamespace(server, toolsText);
          return ns;
        },
      });
    }
    freeze(mcp);
    installGlobal("MCP", mcp);
    installGlobal("namespaces", freeze({ MCP: mcp }));
  }

  // Timers are bridge requests (`sleep`), so they are host work that keeps
  // the cell alive and survives suspension.
  const cleared = new MapCtor(); // timer id -> true

  function setTimeoutImpl(callback, delay, ...args) {
    if (typeof callback !== "function") {
      throw new TypeErrorCtor("setTimeout callback must be a function");
    }
    let ms = +delay;
    if (ms !== ms) ms = 0;
    ms = ms > 0 ? MathFloor(ms) : 0;
    const promise = requestNative("sleep", '{"ms":' + ms + "}");
    const id = lastRequestId();
    promiseThen(
      promise,
      () => {
        if (mapHas(cleared, id)) {
          mapDelete(cleared, id);
          return;
        }
        ReflectApply(callback, undefined, args);
      },
      () => {},
    );
    return id;
  }

  function clearTimeoutImpl(id) {
    if (typeof id === "number" && isPendingNative(id) && !mapHas(cleared, id)) {
      mapSet(cleared, id, true);
      cancelNative(id);
    }
  }

  function yieldControl(reason) {
    return promiseThen(
      hostRequest("yield", { reason: reason === undefined ? null : StringCtor(reason) }),
      () => undefined,
    );
  }

  // `API.read(path)`: virtual declaration files served by the host.
  const apiObject = freeze({
    read(path) {
      return hostRequest("apiRead", { path: StringCtor(path) });
    },
  });

  // Session store (contract §8.8): values are detached JSON copies, writes
  // are buffered by the host and committed when the cell completes.
  function storeKeyError(key) {
    if (typeof key !== "string" || key.length < 1 || key.length > 256) {
      const e = new TypeErrorCtor("store keys must be strings of 1 to 256 characters");
      defineData(e, "code", "store_type");
      return e;
    }
    return null;
  }

  function store(key, value) {
    const bad = storeKeyError(key);
    if (bad !== null) return new PromiseCtor((_, reject) => reject(bad));
    const args =
      value === undefined
        ? '{"key":' + stringify(key) + ',"delete":true}'
        : '{"key":' + stringify(key) + ',"value":' + projectedJson(value) + "}";
    return promiseThen(requestNative("storeSet", args), () => undefined);
  }

  function load(key) {
    const bad = storeKeyError(key);
    if (bad !== null) return new PromiseCtor((_, reject) => reject(bad));
    return promiseThen(hostRequest("storeGet", { key }), (r) => (r.found ? r.value : undefined));
  }

  // Saved results (contract §8.9).
  const resultsObject = freeze({
    save(value) {
      return requestNative("resultSave", '{"value":' + projectedJson(value) + "}");
    },
    load(id) {
      return hostRequest("resultLoad", { id: StringCtor(id) });
    },
    delete(id) {
      return hostRequest("resultDelete", { id: StringCtor(id) });
    },
  });

  installGlobal("catalog", catalogObject);
  const emptyMcp = freeze({});
  installGlobal("MCP", emptyMcp);
  installGlobal("namespaces", freeze({ MCP: emptyMcp }));
  installGlobal("API", apiObject);
  installGlobal("store", store);
  installGlobal("load", load);
  installGlobal("results", resultsObject);
  installGlobal("setTimeout", setTimeoutImpl);
  installGlobal("clearTimeout", clearTimeoutImpl);
  installGlobal("yield_control", yieldControl);

  // ---------------------------------------------------------------------
  // Errors: "<Name>: <message>" plus user frames with user line numbers.

  const USER_FRAME = /quickcell:user\.js:(\d+):(\d+)/;

  function userFrames(stack) {
    if (typeof stack !== "string") return "";
    const lines = stringSplit(stack, "\n");
    const out = [];
    for (let i = 0; i < lines.length && out.length < 20; i++) {
      const m = regexpExec(USER_FRAME, lines[i]);
      if (m === null) continue;
      const line = +m[1] - 1;
      if (line < 1) continue;
      const start = m.index;
      const rewritten =
        stringSlice(lines[i], 0, start) +
        "quickcell:user.js:" +
        line +
        ":" +
        m[2] +
        stringSlice(lines[i], start + m[0].length);
      arrayPush(out, "    " + stringSlice(rewritten, rewritten.indexOf("at ")));
    }
    return arrayJoin(out, "\n");
  }

  function describeError(error) {
    let name = "Error";
    let message;
    let stack;
    let kind = "error";
    try {
      if (error !== null && typeof error === "object" && hasProto(error, errorProto)) {
        const n = dataProp(error, "name");
        const m = dataProp(error, "message");
        name = typeof n === "string" && n !== "" ? n : "Error";
        message = typeof m === "string" ? m : "";
        stack = errorStack(error);
        if (
          hasProto(error, ReferenceErrorProto) &&
          regexpExec(/^'?(require|module|process)'? is not defined$/, message) !== null
        ) {
          kind = "module_access";
        } else if (
          InternalErrorProto !== null &&
          hasProto(error, InternalErrorProto) &&
          message === "out of memory"
        ) {
          kind = "out_of_memory";
        } else if (hasProto(error, InternalErrorProto) && message === "interrupted") {
          kind = "interrupted";
        }
      } else if (typeof error === "string") {
        message = error;
      } else {
        message = projectedJson(error);
      }
    } catch (_) {
      message = "[Unserializable]";
    }
    const frames = userFrames(stack);
    return { kind, error: name + ": " + message + (frames ? "\n" + frames : "") };
  }

  // ---------------------------------------------------------------------
  // The runner: the cell's settlement state, driven from Rust.

  let outcome = null; // { state: "completed", value } | { state: "failed", error }

  // The outcome is set once; the Rust side learns of it through
  // `native.finished` and calls `status` only from then on.
  const finishedNative = native.finished;
  function finish(o) {
    if (outcome === null) {
      outcome = o;
      finishedNative();
    }
  }

  function fail(error) {
    finish({ state: "failed", error });
  }

  // The cell function hands over a function that closes over its body's
  // top-level bindings (host `source::cell_function`). Holding it keeps
  // their values alive after the cell returns: the instance is discarded
  // then, so freeing them one object at a time would be wasted work.
  let keptFrame = null;
  function keepFrame(frame) {
    keptFrame = frame;
  }

  const runner = {
    materializeTool,
    start(cell, toolNamesText, mcpLayout) {
      installTools(toolNamesText);
      installMcp(mcpLayout);
      let promise;
      try {
        promise = cell(keepFrame);
      } catch (e) {
        fail(e);
        return;
      }
      promiseThen(
        promise,
        (value) => {
          finish({ state: "completed", value });
        },
        fail,
      );
    },
    evalError(error) {
      fail(error);
    },
    jobError(error) {
      fail(error);
    },
    // The error a failed bridge request rejects with, from the host's
    // `{message, code}` (called by the Rust side of `settle`).
    bridgeError,
    status() {
      // Constant text: JSON.stringify costs ~25k fuel even for tiny objects.
      if (outcome === null) return '{"state":"pending"}';
      if (outcome.state === "completed") {
        return '{"state":"completed","value":' + projectedJson(outcome.value) + "}";
      }
      const d = describeError(outcome.error);
      return stringify({ state: "failed", kind: d.kind, error: d.error });
    },
  };
  return freeze(runner);
});
