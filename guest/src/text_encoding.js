// TextEncoder and TextDecoder (the WHATWG Encoding Standard's UTF-8 codec,
// no streaming) over two native functions of text_encoding.rs. Evaluated
// once at pre-initialization; returns the two classes.
(function (encodeUtf8, decodeUtf8) {
  "use strict";
  const LABELS = [
    "unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8",
    "utf-8", "utf8", "x-unicode20utf8",
  ];
  const OPTIONS = new WeakMap();

  class TextEncoder {
    get encoding() { return "utf-8"; }

    encode(input = "") {
      return new Uint8Array(encodeUtf8(String(input).toWellFormed()));
    }

    // Writes as many whole code points of `source` as fit; returns how
    // many UTF-16 units were read and bytes written.
    encodeInto(source, destination) {
      if (!(destination instanceof Uint8Array)) {
        throw new TypeError("TextEncoder.encodeInto: the destination must be a Uint8Array");
      }
      const text = String(source).toWellFormed();
      const room = destination.length;
      let read = 0;
      let written = 0;
      while (read < text.length) {
        const unit = text.charCodeAt(read);
        const bytes = unit < 0x80 ? 1 : unit < 0x800 ? 2 : unit >= 0xd800 && unit < 0xdc00 ? 4 : 3;
        if (written + bytes > room) break;
        written += bytes;
        read += bytes === 4 ? 2 : 1;
      }
      destination.set(new Uint8Array(encodeUtf8(text.slice(0, read))));
      return { read, written };
    }
  }

  class TextDecoder {
    constructor(label = "utf-8", options = undefined) {
      const name = String(label).trim().toLowerCase();
      if (!LABELS.includes(name)) {
        throw new RangeError(`TextDecoder: the encoding "${label}" is not supported (only utf-8 is)`);
      }
      const fatal = options !== undefined && options !== null && Boolean(options.fatal);
      const ignoreBOM = options !== undefined && options !== null && Boolean(options.ignoreBOM);
      OPTIONS.set(this, { fatal, ignoreBOM });
    }

    get encoding() { return "utf-8"; }
    get fatal() { return OPTIONS.get(this).fatal; }
    get ignoreBOM() { return OPTIONS.get(this).ignoreBOM; }

    decode(input = undefined, options = undefined) {
      const own = OPTIONS.get(this);
      if (own === undefined) throw new TypeError("TextDecoder.decode: not a TextDecoder");
      if (options !== undefined && options !== null && options.stream) {
        throw new TypeError("TextDecoder.decode: streaming is not supported");
      }
      if (input === undefined) return "";
      let buffer, offset, length;
      if (ArrayBuffer.isView(input)) {
        buffer = input.buffer;
        offset = input.byteOffset;
        length = input.byteLength;
      } else if (input instanceof ArrayBuffer) {
        buffer = input;
        offset = 0;
        length = input.byteLength;
      } else {
        throw new TypeError("TextDecoder.decode: the input must be an ArrayBuffer or a view of one");
      }
      return decodeUtf8(buffer, offset, length, own.fatal, own.ignoreBOM);
    }
  }

  return [TextEncoder, TextDecoder];
})
