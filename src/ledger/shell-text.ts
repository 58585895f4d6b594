/**
 * The synthetic text of the user message a `Shell` call stores (OpenCode `SessionPrompt.shell`),
 * which is also what the model is sent for a subtask part (OpenCode `MessageV2.toModelMessages`).
 */
export const SHELL_USER_TEXT = "The following tool was executed by the user";
