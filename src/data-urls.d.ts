// Local typings for data-urls 7 (WHATWG fetch "data: URL processor"); the package ships none.
declare module "data-urls" {
  /** A parsed MIME type (whatwg-mimetype). */
  export interface MIMEType {
    type: string;
    subtype: string;
    essence: string;
    parameters: Map<string, string>;
    toString(): string;
  }
  /** Parses a `data:` URL string; null when it is not a valid data: URL. */
  export default function parseDataURL(input: string): { mimeType: MIMEType; body: Uint8Array } | null;
}

// Local typings for whatwg-url 16 (WHATWG URL), the parser data-urls runs on; the package ships none.
declare module "whatwg-url" {
  /** UTF-8 encodes `input`, then decodes each `%XX` (two hex digits) to its byte; other `%` stay. */
  export function percentDecodeString(input: string): Uint8Array;
}
