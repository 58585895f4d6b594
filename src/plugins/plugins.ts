import { pathToFileURL } from "node:url";
import path from "node:path";
import { fromJson, toJson, type JsonObject } from "@bufbuild/protobuf";
import { MessageSchema, type Message } from "../../gen/ledger/v1/message_pb.js";
import { PartSchema, type Part } from "../../gen/ledger/v1/part_pb.js";
import { isId, newId } from "../ids.js";
import { ConfigError } from "../config/config-error.js";
import { PluginError } from "../errors.js";

/**
 * What a `chatMessage` hook receives and may change: the user message and its resolved parts
 * in their proto JSON form (camelCase, e.g. `{ id, sessionId, messageId, text: { text, synthetic } }`).
 * Parts added without `id`/`sessionId`/`messageId` get them from the server.
 * Mutate them in place or return a replacement `{ message?, parts? }`.
 */
export interface ChatMessageHookInput {
  message: JsonObject;
  parts: JsonObject[];
}

/** A plugin module: any subset of these hooks (named exports). */
export interface PluginModule {
  /**
   * OpenCode's `chat.message` hook: runs after draft resolution and before the message is
   * saved. May rewrite text, add or drop parts. Throwing aborts the prompt with nothing stored.
   */
  chatMessage?: (input: ChatMessageHookInput) => void | Partial<ChatMessageHookInput> | Promise<void | Partial<ChatMessageHookInput>>;
}

/** Loaded plugins, applied in config order. */
export interface PluginHost {
  /** The plugin names (paths or package names) in order. */
  readonly names: string[];
  /**
   * Runs every `chatMessage` hook on `{message, parts}` and returns the result. Throws
   * `PluginError` (INTERNAL, nothing stored) when a hook throws, changes the message or session
   * id, or returns parts that are not valid `ledger.v1.Part` JSON with `prt_` ids.
   */
  chatMessage(message: Message, parts: Part[]): Promise<{ message: Message; parts: Part[] }>;
}

/**
 * Imports each plugin module (absolute path or package name) once. Throws `ConfigError` when a
 * module cannot be imported, naming it and why (`plugin opencode-wakatime cannot be loaded:
 * Cannot find package 'opencode-wakatime' …`), with a reminder that OpenCode plugins are not
 * plugins of this service (docs/configuration.md#plugins): it stops the start.
 */
export async function loadPlugins(specifiers: string[]): Promise<PluginHost> {
  const loaded: Array<{ name: string; module: PluginModule }> = [];
  for (const spec of specifiers) {
    try {
      const url = path.isAbsolute(spec) ? pathToFileURL(spec).href : spec;
      loaded.push({ name: spec, module: (await import(url)) as PluginModule });
    } catch (cause) {
      const why = cause instanceof Error ? cause.message.split("\n")[0] : String(cause);
      throw new ConfigError(
        `plugin ${spec} cannot be loaded: ${why} (a plugin is a module of this service's plugin interface, ` +
          "not an OpenCode plugin: docs/configuration.md#plugins)",
        { cause },
      );
    }
  }
  return {
    names: loaded.map((p) => p.name),
    async chatMessage(message, parts) {
      let current = { message, parts };
      for (const plugin of loaded) {
        if (typeof plugin.module.chatMessage !== "function") continue;
        current = await applyHook(plugin.name, plugin.module.chatMessage, current.message, current.parts);
      }
      return current;
    },
  };
}

async function applyHook(
  name: string,
  hook: NonNullable<PluginModule["chatMessage"]>,
  message: Message,
  parts: Part[],
): Promise<{ message: Message; parts: Part[] }> {
  const input: ChatMessageHookInput = {
    message: toJson(MessageSchema, message) as JsonObject,
    parts: parts.map((p) => toJson(PartSchema, p) as JsonObject),
  };
  try {
    const returned = (await hook(input)) ?? {};
    const nextMessage = fromJson(MessageSchema, returned.message ?? input.message);
    const nextParts = (returned.parts ?? input.parts).map((p) => fromJson(PartSchema, p));
    const before = message.kind.value!;
    const after = nextMessage.kind.value;
    if (!after || after.id !== before.id || after.sessionId !== before.sessionId)
      throw new Error("the hook changed the message id or session id");
    for (const part of nextParts) {
      // Parts a hook adds may leave ids empty: the server fills them.
      part.id ||= newId("prt");
      part.sessionId ||= before.sessionId;
      part.messageId ||= before.id;
      if (!isId("prt", part.id) || part.messageId !== before.id || part.sessionId !== before.sessionId || !part.kind.case) {
        throw new Error(`the hook returned an invalid part ${part.id}`);
      }
    }
    return { message: nextMessage, parts: nextParts };
  } catch (cause) {
    throw new PluginError(name, "chatMessage", { cause });
  }
}
