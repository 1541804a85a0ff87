/* The chat page of tool_calling.contrib.chat: plain JavaScript over tool_calling's HTTP API.
 *
 * - Sends messages (POST /api/conversations/{id}/messages/) with the session and CSRF token.
 * - Follows a run with EventSource on GET /api/runs/{id}/events/. The browser reconnects a
 *   dropped stream with Last-Event-ID; after a reload the page reads the active run's events
 *   again from the first (the server showed the messages before it). Events are applied once
 *   each, by sequence, so no text is lost or shown twice.
 * - Fills in the arguments and results of tool calls from GET /api/conversations/{id}/?after=N.
 * - Gives approvers the queue of waiting calls (GET /api/tool-executions/?status=...) with
 *   approve (arguments editable, checked by the server) and deny (with a reason), on the calls
 *   they may decide (``can_decide``); the others are listed with whom they wait for.
 * - Asks the user to confirm (or decline) a call of their own turn that waits for their
 *   confirmation, in the transcript, with the same two API endpoints.
 *
 * Everything a model, a tool or a user wrote goes into the page as text (textContent, text
 * nodes), never as HTML.
 */
(function () {
  "use strict";

  const configNode = document.getElementById("tool-calling-chat-config");
  if (!configNode) {
    return;
  }
  const config = JSON.parse(configNode.textContent);

  // The page's own words, in one place.
  const TEXT = {
    you: "You",
    assistant: "Assistant",
    toolCall: "Tool call",
    argumentsOf: (name) => `Arguments of ${name}`,
    resultOf: (name) => `Result of ${name}`,
    errorOf: (name) => `Error of ${name}`,
    ms: (ms) => `${ms} ms`,
    waitingNote: "Waiting for a person to approve this call.",
    confirmNote: "This call waits for your confirmation before it runs.",
    confirm: (name) => `Confirm ${name}`,
    confirmAlways: (name) => `Confirm, and always allow ${name} in this conversation`,
    confirmedAlwaysNote: "You confirmed it; its next calls in this conversation run without asking.",
    decline: (name) => `Decline ${name}`,
    confirmedNote: "You confirmed it.",
    confirmedNextNote: "You confirmed it; an approver decides next.",
    declinedNote: "You declined it; it was not run.",
    waitingForConfirmation: "Waiting for your confirmation…",
    toolNeedsYou: (name) => `Tool ${name} waits for your confirmation.`,
    waitsForUser: (user) => `Waits for ${user} to confirm it first.`,
    ownCall: "You asked for this call: another person approves it.",
    askedAt: (when) => `Asked ${when}`,
    expiresAt: (when) => `expires ${when}`,
    inConversation: (title) => `In “${title}”`,
    untitled: "an untitled conversation",
    userWrote: (text) => `The user wrote: ${text}`,
    approvedNote: "Approved.",
    approvedEditedNote: "Approved, with edited arguments.",
    deniedNote: (reason) => (reason ? `Denied: ${reason}` : "Denied."),
    expiredNote: "Nobody approved it in time.",
    queued: "Queued…",
    thinking: "The model is writing…",
    callingTools: "Running tools…",
    waitingForApproval: "Waiting for approval…",
    stopping: "Stopping…",
    retried: "Trying again…",
    reconnecting: "Reconnecting…",
    answered: "The answer is complete.",
    cancelled: "The answer was stopped.",
    failed: (error) => `The answer failed: ${error}`,
    streamLost: "The connection to the answer was lost. Reload the page to try again.",
    toolStarted: (name) => `Tool ${name} started.`,
    toolEnded: (name, status) => `Tool ${name}: ${status}.`,
    toolWaits: (name) => `Tool ${name} is waiting for approval.`,
    emptyMessage: "Write a message first.",
    busy: "Wait for the answer to finish, or stop it, before sending another message.",
    sent: "Message sent.",
    network: "The server could not be reached. Check the connection and try again.",
    serverSaid: (status) => `The server answered ${status}.`,
    askedBy: (user) => `Asked by ${user}`,
    unknownUser: "an unknown user",
    argumentsLabel: "Arguments (JSON)",
    reasonLabel: "Reason for denying (the model reads it)",
    approve: (name) => `Approve ${name}`,
    deny: (name) => `Deny ${name}`,
    notJson: (message) => `The arguments are not valid JSON: ${message}`,
    notObject: "The arguments must be a JSON object, like {\"name\": \"value\"}.",
    needReason: "Write a reason for denying the call.",
    approved: (name) => `Approved ${name}.`,
    denied: (name) => `Denied ${name}.`,
    waitingCount: (count) => `(${count})`,
    moreWaiting: (shown, count) => `Showing ${shown} of ${count}; decide these to see more.`,
  };

  const EVENT_KINDS = [
    "queued", "running", "retried", "cancel_requested", "model_call", "text_delta",
    "model_message", "tool_calls", "approval_needed", "approval_decided",
    "tool_call_started", "tool_call_ended", "tool_results", "succeeded", "failed", "cancelled",
  ];
  const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);
  const READ_ATTEMPTS = 3; // reads of stored messages, when the server could not answer

  // -- small helpers ---------------------------------------------------------------------------

  /** An element with attributes ("text" sets textContent) and children (strings become text). */
  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === null || value === undefined || value === false) {
        continue;
      }
      if (name === "text") {
        node.textContent = value;
      } else if (name === "class") {
        node.className = value;
      } else {
        node.setAttribute(name, value === true ? "" : String(value));
      }
    }
    for (const child of children) {
      if (child !== null && child !== undefined && child !== false) {
        node.append(child);
      }
    }
    return node;
  }

  const statusRegion = document.getElementById("chat-status");

  /** Tell screen readers, politely. */
  function announce(message) {
    if (statusRegion) {
      statusRegion.textContent = message;
    }
  }

  function statusLabel(status) {
    return (config.statusLabels && config.statusLabels[status]) || status;
  }

  /** A time from the API (ISO 8601) in the reader's locale; blank when there is none. */
  function when(iso) {
    if (!iso) {
      return "";
    }
    const date = new Date(iso);
    return Number.isNaN(date.getTime()) ? iso : date.toLocaleString();
  }

  /** JSON text indented (arguments, most results); anything else as it is. */
  function pretty(text) {
    if (typeof text !== "string") {
      return JSON.stringify(text, null, 2);
    }
    try {
      const value = JSON.parse(text);
      if (value !== null && typeof value === "object") {
        return JSON.stringify(value, null, 2);
      }
    } catch (error) {
      // Not JSON: shown as it is.
    }
    return text;
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  /** What the API said went wrong: its ``detail``, or each field's messages. */
  function problem(status, data) {
    if (data && typeof data === "object") {
      if (typeof data.detail === "string") {
        return data.detail;
      }
      const parts = [];
      for (const [field, messages] of Object.entries(data)) {
        const list = (Array.isArray(messages) ? messages : [messages]).map(String).join(" ");
        parts.push(field === "non_field_errors" ? list : `${field}: ${list}`);
      }
      if (parts.length) {
        return parts.join(" ");
      }
    }
    return TEXT.serverSaid(status);
  }

  /** A JSON request to the API with the session's CSRF token; throws ApiError on failure. */
  async function api(method, url, body) {
    const headers = { Accept: "application/json" };
    const init = { method, headers, credentials: "same-origin" };
    if (method !== "GET") {
      headers["X-CSRFToken"] = config.csrfToken;
    }
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(url, init);
    } catch (error) {
      throw new ApiError(0, TEXT.network);
    }
    let data = null;
    if (response.status !== 204) {
      try {
        data = await response.json();
      } catch (error) {
        data = null;
      }
    }
    if (!response.ok) {
      throw new ApiError(response.status, problem(response.status, data));
    }
    return data;
  }

  /** GET ``url``, again after 1 s and 2 s when the server could not answer (network, 5xx). */
  async function readWithRetries(url) {
    for (let attempt = 1; ; attempt += 1) {
      try {
        return await api("GET", url);
      } catch (error) {
        const transient = error.status === 0 || error.status >= 500;
        if (!transient || attempt === READ_ATTEMPTS) {
          throw error;
        }
      }
      await new Promise((resolve) => window.setTimeout(resolve, 1000 * 2 ** (attempt - 1)));
    }
  }

  // -- the transcript ------------------------------------------------------------------------

  const transcript = document.getElementById("transcript");

  /** One tool call: the same markup as the server's (_tool_call.html). */
  class CallView {
    constructor(list, id, name) {
      this.id = id;
      this.name = name;
      this.status = el("span", { class: "tc-tool-status" });
      this.duration = el("span", { class: "tc-tool-duration" });
      this.note = el("p", { class: "tc-tool-note", hidden: true });
      this.arguments = el("pre");
      this.result = el("pre");
      this.argumentsBox = el(
        "details", { class: "tc-tool-arguments", hidden: true },
        el("summary", { text: TEXT.argumentsOf(name) }), this.arguments,
      );
      this.resultSummary = el("summary", { text: TEXT.resultOf(name) });
      this.resultBox = el("details", { class: "tc-tool-result", hidden: true }, this.resultSummary,
        this.result);
      this.node = el(
        "li", { class: "tc-tool-call", "data-call-id": id },
        el("p", { class: "tc-tool-call-head" },
          el("span", { class: "tc-tool-label", text: TEXT.toolCall }), " ",
          el("code", { class: "tc-tool-name", text: name }), " ", this.status, " ", this.duration),
        this.note, this.argumentsBox, this.resultBox,
      );
      list.append(this.node);
    }

    setStatus(status) {
      this.node.dataset.status = status;
      this.status.textContent = statusLabel(status);
    }

    setDuration(ms) {
      this.duration.textContent = ms === null || ms === undefined ? "" : TEXT.ms(ms);
    }

    setNote(text) {
      this.note.textContent = text;
      this.note.hidden = !text;
    }

    setArguments(text) {
      this.arguments.textContent = pretty(text);
      this.argumentsBox.hidden = false;
    }

    /** Confirm / Decline buttons for a call of the user's own turn that waits for them. */
    askConfirmation(url) {
      if (this.confirmation) {
        return;
      }
      const error = el("p", { class: "tc-error", role: "alert", hidden: true });
      const confirmButton = el("button", { type: "button", class: "tc-confirm",
        text: TEXT.confirm(this.name) });
      const alwaysButton = el("button", { type: "button", class: "tc-confirm-always",
        text: TEXT.confirmAlways(this.name) });
      const declineButton = el("button", { type: "button", class: "tc-decline",
        text: TEXT.decline(this.name) });
      this.confirmation = el("div", { class: "tc-confirmation" },
        confirmButton, " ", alwaysButton, " ", declineButton, error);
      this.node.append(this.confirmation);
      this.argumentsBox.open = true; // what is being confirmed, in view
      const decide = async (path, body, done) => {
        try {
          const decided = await api("POST", `${url}${path}/`, body);
          this.endConfirmation();
          this.setNote(done(decided));
          announce(this.note.textContent);
        } catch (failure) {
          error.textContent = failure.message;
          error.hidden = false;
        }
      };
      confirmButton.addEventListener("click", () => decide("approve", {},
        (decided) => (decided.stage === "approver" ? TEXT.confirmedNextNote : TEXT.confirmedNote)));
      alwaysButton.addEventListener("click", () => decide("approve", { remember: true },
        (decided) => (decided.stage === "approver" ? TEXT.confirmedNextNote
          : TEXT.confirmedAlwaysNote)));
      declineButton.addEventListener("click", () => decide("deny", {},
        () => TEXT.declinedNote));
    }

    endConfirmation() {
      if (this.confirmation) {
        this.confirmation.remove();
        this.confirmation = null;
      }
    }

    setResult(text, isError) {
      this.result.textContent = pretty(text);
      this.resultSummary.textContent = isError ? TEXT.errorOf(this.name) : TEXT.resultOf(this.name);
      this.resultBox.classList.toggle("tc-is-error", Boolean(isError));
      this.resultBox.hidden = false;
    }
  }

  /** The assistant's message of one round of a run: its text as it streams, then its calls. */
  class AssistantView {
    constructor() {
      this.text = el("p", { class: "tc-text", hidden: true });
      this.calls = el("ul", { class: "tc-tool-calls", hidden: true });
      this.node = el("li", { class: "tc-message tc-assistant" },
        el("h2", { class: "tc-author", text: TEXT.assistant }), this.text, this.calls);
      transcript.append(this.node);
    }

    appendText(piece) {
      this.text.append(document.createTextNode(piece));
      this.text.hidden = false;
    }

    setText(text) {
      this.text.textContent = text;
      this.text.hidden = !text;
    }

    get written() {
      return this.text.textContent;
    }

    addCall(id, name) {
      this.calls.hidden = false;
      return new CallView(this.calls, id, name);
    }
  }

  function appendUserMessage(text) {
    const empty = document.getElementById("transcript-empty");
    if (empty) {
      empty.remove();
    }
    transcript.append(el("li", { class: "tc-message tc-user" },
      el("h2", { class: "tc-author", text: TEXT.you }), el("p", { class: "tc-text", text })));
  }

  // -- following a run -------------------------------------------------------------------------

  const runState = document.getElementById("run-state");

  let lastState = "";

  /** What the run is doing, under the transcript; ``passing`` states are not remembered. */
  function showState(text, passing) {
    if (!passing) {
      lastState = text;
    }
    if (runState) {
      runState.textContent = text;
      runState.hidden = !text;
    }
  }

  /** One run, rebuilt from its events: text per round, tool calls, approvals, the end. */
  class RunView {
    constructor(run, onEnd) {
      this.run = run;
      this.onEnd = onEnd;
      this.lastEvent = 0;
      this.readThrough = run.userSequence; // the newest stored message read
      this.assistantMessages = 0;
      this.round = 0;
      this.rounds = new Map();
      this.calls = new Map();
      this.reading = Promise.resolve();
      this.ended = false;
    }

    start() {
      this.source = new EventSource(this.run.eventsUrl);
      for (const kind of EVENT_KINDS) {
        this.source.addEventListener(kind, (event) => this.receive(kind, event));
      }
      this.source.addEventListener("open", () => showState(lastState));
      this.source.addEventListener("error", () => {
        if (this.ended) {
          return;
        }
        if (this.source.readyState === EventSource.CLOSED) {
          this.finish(TEXT.streamLost, true);
        } else {
          showState(TEXT.reconnecting, true); // the browser reconnects with Last-Event-ID
        }
      });
    }

    receive(kind, event) {
      const message = JSON.parse(event.data);
      if (this.ended || message.sequence <= this.lastEvent) {
        return; // already applied
      }
      this.lastEvent = message.sequence;
      const data = message.data || {};
      switch (kind) {
        case "queued":
          if (this.readThrough === null || this.readThrough === undefined) {
            this.readThrough = data.message;
          }
          showState(TEXT.queued);
          break;
        case "running":
          showState(TEXT.thinking);
          break;
        case "retried":
          showState(TEXT.retried);
          break;
        case "cancel_requested":
          showState(TEXT.stopping);
          break;
        case "model_call": {
          this.round = data.round;
          const view = this.roundView(data.round);
          view.setText(""); // a round called again (a retry) writes its text again
          view.node.setAttribute("aria-busy", "true");
          showState(TEXT.thinking);
          break;
        }
        case "text_delta":
          this.roundView(data.round).appendText(data.text || "");
          break;
        case "model_message":
          this.roundView(this.round).node.removeAttribute("aria-busy");
          if (data.tool_calls) {
            this.readMessages();
          }
          break;
        case "tool_calls":
          showState(TEXT.callingTools);
          break;
        case "approval_needed": {
          const call = this.call(data.tool_call_id, data.tool);
          call.setStatus("awaiting_approval");
          if (data.stage === "user") {
            call.setNote(TEXT.confirmNote);
            call.askConfirmation(`${config.api.executions}${data.execution}/`);
            showState(TEXT.waitingForConfirmation);
            announce(TEXT.toolNeedsYou(data.tool));
          } else {
            call.setNote(TEXT.waitingNote);
            showState(TEXT.waitingForApproval);
            announce(TEXT.toolWaits(data.tool));
          }
          document.dispatchEvent(new CustomEvent("tc-approvals-changed"));
          break;
        }
        case "approval_decided": {
          const call = this.call(data.tool_call_id, data.tool);
          call.endConfirmation();
          call.setNote(this.decision(data));
          if (data.decision === "confirmed") {
            showState(TEXT.waitingForApproval); // an approver decides next
          } else {
            // Approved: it waits for a worker now; otherwise it never runs.
            call.setStatus(data.decision === "approved" ? "pending" : "denied");
          }
          document.dispatchEvent(new CustomEvent("tc-approvals-changed"));
          break;
        }
        case "tool_call_started":
          this.call(data.tool_call_id, data.tool).setStatus("running");
          showState(TEXT.callingTools);
          announce(TEXT.toolStarted(data.tool));
          break;
        case "tool_call_ended": {
          const call = this.call(data.tool_call_id, data.tool);
          call.setStatus(data.status);
          call.setDuration(data.duration_ms);
          announce(TEXT.toolEnded(data.tool, statusLabel(data.status)));
          break;
        }
        case "tool_results":
          this.readMessages();
          break;
        case "succeeded":
          this.answer(data.answer || "");
          this.finish(TEXT.answered, false);
          break;
        case "failed":
          this.fail(data.error || "");
          break;
        case "cancelled":
          this.finish(TEXT.cancelled, false);
          break;
        default:
          break;
      }
    }

    decision(data) {
      if (data.decision === "confirmed") {
        return TEXT.confirmedNextNote;
      }
      if (data.decision === "approved") {
        return data.edited ? TEXT.approvedEditedNote : TEXT.approvedNote;
      }
      if (data.decision === "expired") {
        return TEXT.expiredNote;
      }
      return TEXT.deniedNote(data.reason);
    }

    roundView(round) {
      if (!this.rounds.has(round)) {
        this.rounds.set(round, new AssistantView());
      }
      return this.rounds.get(round);
    }

    call(id, name, view) {
      if (!this.calls.has(id)) {
        this.calls.set(id, (view || this.roundView(this.round)).addCall(id, name));
      }
      return this.calls.get(id);
    }

    /** Read the messages stored since the last read: the calls' arguments and results.
     *
     * Reads run one after another (``this.reading``), and the end of the run waits for them:
     * the page says the answer is complete only once every result it will show is in place.
     */
    readMessages() {
      const url = config.conversation.url;
      this.reading = this.reading.then(async () => {
        if (this.readThrough === null || this.readThrough === undefined) {
          return;
        }
        const data = await readWithRetries(
          `${url}?after=${encodeURIComponent(this.readThrough)}`);
        for (const message of data.messages) {
          this.readThrough = Math.max(this.readThrough, message.sequence);
          if (message.role === "assistant") {
            // A run's n-th stored assistant message is the model's answer of round n.
            this.assistantMessages += 1;
            const view = this.roundView(this.assistantMessages);
            for (const call of message.tool_calls || []) {
              this.call(call.id, call.name, view).setArguments(call.arguments);
            }
          } else if (message.role === "tool") {
            for (const response of message.tool_responses || []) {
              const call = this.calls.get(response.id);
              if (call) {
                call.setResult(response.response_data, response.is_error);
              }
            }
          }
        }
      }).catch((error) => showState(error.message));
    }

    answer(text) {
      const last = this.rounds.get(this.round);
      if (!text || (last && last.written === text)) {
        return;
      }
      if (last && !last.written) {
        // A tool answered directly (return-direct): its result is the answer.
        this.roundView(this.round + 1).setText(text);
      } else {
        // What was stored wins over what streamed.
        this.roundView(this.round).setText(text);
      }
    }

    fail(error) {
      const view = this.roundView(this.round || 1);
      view.node.append(el("p", { class: "tc-run-error", text: TEXT.failed(error) }));
      this.finish(TEXT.failed(error), true);
    }

    finish(message, isError) {
      this.ended = true;
      if (this.source) {
        this.source.close();
      }
      // The stream is over; the results of its last calls may still be loading.
      this.reading.then(() => {
        for (const view of this.rounds.values()) {
          view.node.removeAttribute("aria-busy");
        }
        showState(isError ? message : "");
        announce(message);
        this.onEnd();
      });
    }
  }

  // -- the message box -------------------------------------------------------------------------

  const composer = document.getElementById("composer");
  const textarea = document.getElementById("message");
  const sendButton = document.getElementById("send");
  const stopButton = document.getElementById("stop");
  const composerError = document.getElementById("composer-error");
  let current = null; // the RunView being followed

  function composerProblem(message) {
    composerError.textContent = message || "";
    composerError.hidden = !message;
  }

  function setBusy(busy) {
    // Disabled buttons would drop keyboard focus; aria-disabled keeps it where it is.
    sendButton.setAttribute("aria-disabled", busy ? "true" : "false");
    if (stopButton) {
      stopButton.hidden = !(busy && current);
    }
  }

  function follow(run) {
    current = new RunView(run, () => {
      current = null;
      setBusy(false);
    });
    setBusy(true);
    current.start();
  }

  function titleFrom(text) {
    const line = text.trim().split("\n")[0];
    return line.length > 80 ? `${line.slice(0, 79)}…` : line;
  }

  async function send(text) {
    if (!config.conversation) {
      // A new conversation: create it, send, then open its page (which follows the run).
      const created = await api("POST", config.api.conversations, { title: titleFrom(text) });
      try {
        await api("POST", created.messages_url, { text });
      } catch (error) {
        await api("DELETE", created.url).catch(() => null);
        throw error;
      }
      window.location.assign(config.conversationPage.replace(config.anyId, created.id));
      return;
    }
    const run = await api("POST", config.conversation.messagesUrl, { text });
    textarea.value = "";
    appendUserMessage(text);
    announce(TEXT.sent);
    follow({ id: run.id, eventsUrl: run.urls.events, cancelUrl: run.urls.cancel, userSequence: null });
  }

  if (composer) {
    let sending = false;
    composer.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (sending || current) {
        composerProblem(TEXT.busy);
        return;
      }
      const text = textarea.value;
      if (!text.trim()) {
        composerProblem(TEXT.emptyMessage);
        textarea.focus();
        return;
      }
      composerProblem("");
      sending = true;
      setBusy(true);
      try {
        await send(text);
      } catch (error) {
        composerProblem(error.message);
        if (!current) {
          setBusy(false);
        }
      } finally {
        sending = false;
      }
    });
    textarea.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        composer.requestSubmit();
      }
    });
  }

  if (stopButton) {
    stopButton.addEventListener("click", async () => {
      if (!current) {
        return;
      }
      try {
        await api("POST", current.run.cancelUrl);
        showState(TEXT.stopping);
      } catch (error) {
        composerProblem(error.message);
      }
    });
  }

  if (config.activeRun && transcript) {
    follow(config.activeRun);
  }

  // -- the approval queue ----------------------------------------------------------------------

  /** The calls waiting for a person: approve (arguments editable) or deny (with a reason). */
  class ApprovalQueue {
    constructor() {
      this.list = document.getElementById("approvals-list");
      this.count = document.getElementById("approvals-count");
      this.empty = document.getElementById("approvals-empty");
      this.more = document.getElementById("approvals-more");
      this.heading = document.getElementById("approvals-heading");
      this.status = document.getElementById("approvals-status");
      this.items = new Map();
      this.loading = false;
      this.again = false;
      document.getElementById("approvals-refresh").addEventListener("click", () => this.refresh());
      document.addEventListener("tc-approvals-changed", () => this.refresh());
      // Calls of other users' turns arrive too: look again now and then while the page shows.
      window.setInterval(() => {
        if (!document.hidden) {
          this.refresh();
        }
      }, 10000);
      this.refresh();
    }

    async refresh() {
      if (this.loading) {
        this.again = true;
        return;
      }
      this.loading = true;
      try {
        const data = await api("GET", `${config.api.executions}?status=awaiting_approval`);
        const seen = new Set();
        for (const call of data.results) {
          seen.add(call.id);
          if (!this.items.has(call.id)) {
            this.add(call);
          }
        }
        for (const [id, item] of this.items) {
          if (!seen.has(id)) {
            item.remove(); // decided elsewhere
            this.items.delete(id);
          }
        }
        this.count.textContent = data.count ? TEXT.waitingCount(data.count) : "";
        this.empty.hidden = data.count > 0;
        this.more.hidden = data.count <= data.results.length;
        this.more.textContent = TEXT.moreWaiting(data.results.length, data.count);
      } catch (error) {
        this.more.hidden = false;
        this.more.textContent = error.message;
      } finally {
        this.loading = false;
        if (this.again) {
          this.again = false;
          this.refresh();
        }
      }
    }

    add(call) {
      const key = `approval-${call.id}`;
      const original = pretty(call.arguments);
      const editor = el("textarea", {
        id: `${key}-arguments`, class: "tc-json", rows: Math.min(12, original.split("\n").length + 1),
        spellcheck: "false", "aria-describedby": `${key}-error`,
      });
      editor.textContent = original; // its initial value, as text
      const reason = el("input", {
        type: "text", id: `${key}-reason`, maxlength: 2000, "aria-describedby": `${key}-error`,
      });
      const error = el("p", { class: "tc-error", id: `${key}-error`, role: "alert", hidden: true });
      const approveForm = el("form", { class: "tc-approve-form" },
        el("label", { for: editor.id, text: TEXT.argumentsLabel }), editor,
        el("button", { type: "submit", class: "tc-approve", text: TEXT.approve(call.tool_name) }));
      const denyForm = el("form", { class: "tc-deny-form" },
        el("label", { for: reason.id, text: TEXT.reasonLabel }), reason,
        el("button", { type: "submit", class: "tc-deny", text: TEXT.deny(call.tool_name) }));
      const asked = [TEXT.askedAt(when(call.created_at))];
      if (call.approval_expires_at) {
        asked.push(TEXT.expiresAt(when(call.approval_expires_at)));
      }
      const context = [
        el("p", { class: "tc-approval-meta",
          text: `${TEXT.askedBy(call.requested_by || TEXT.unknownUser)} · ${asked.join(", ")}` }),
        el("p", { class: "tc-approval-meta",
          text: TEXT.inConversation(call.conversation_title || TEXT.untitled) }),
      ];
      if (call.user_message) {
        context.push(el("blockquote", { class: "tc-approval-message",
          text: TEXT.userWrote(call.user_message) }));
      }
      // Only where this person may decide: no button that the server would refuse.
      let forms = [approveForm, denyForm];
      if (!call.can_decide) {
        const why = call.stage === "user"
          ? TEXT.waitsForUser(call.requested_by || TEXT.unknownUser) : TEXT.ownCall;
        forms = [el("p", { class: "tc-approval-waits", text: why })];
      }
      const item = el("li", { class: "tc-approval", id: key, "data-execution": call.id,
        "aria-labelledby": `${key}-name` },
        el("h3", { id: `${key}-name` }, el("code", { text: call.tool_name })),
        ...context, ...forms, error);

      const complain = (message, field) => {
        error.textContent = message;
        error.hidden = false;
        if (field) {
          field.focus();
        }
      };
      const decided = (message) => {
        const next = item.nextElementSibling || item.previousElementSibling;
        item.remove();
        this.items.delete(call.id);
        announce(message);
        // Seen as well as heard: the decision stays written above the queue.
        this.status.textContent = message;
        this.status.hidden = false;
        // Keep the keyboard in the queue: the next call's editor, else the heading.
        const target = next ? next.querySelector("textarea, button") : this.heading;
        (target || this.heading).focus();
        this.refresh();
      };

      approveForm.addEventListener("submit", async (event) => {
        event.preventDefault();
        let body = {};
        if (editor.value.trim() !== original.trim()) {
          let edited;
          try {
            edited = JSON.parse(editor.value);
          } catch (problemParsing) {
            complain(TEXT.notJson(problemParsing.message), editor);
            return;
          }
          if (edited === null || typeof edited !== "object" || Array.isArray(edited)) {
            complain(TEXT.notObject, editor);
            return;
          }
          body = { arguments: edited }; // the server checks them against the tool's schema
        }
        try {
          await api("POST", call.urls.approve, body);
        } catch (failure) {
          complain(failure.message, editor);
          return;
        }
        decided(TEXT.approved(call.tool_name));
      });
      denyForm.addEventListener("submit", async (event) => {
        event.preventDefault();
        if (!reason.value.trim()) {
          complain(TEXT.needReason, reason);
          return;
        }
        try {
          await api("POST", call.urls.deny, { reason: reason.value });
        } catch (failure) {
          complain(failure.message, reason);
          return;
        }
        decided(TEXT.denied(call.tool_name));
      });

      this.list.append(item);
      this.items.set(call.id, item);
    }
  }

  // The server writes the conversation list's times in its own format; the queue's come from
  // the API: both are shown the one way, in the reader's locale.
  for (const time of document.querySelectorAll("time[datetime]")) {
    time.textContent = when(time.getAttribute("datetime"));
  }

  if (config.canApprove && document.getElementById("approvals")) {
    new ApprovalQueue(); // eslint-disable-line no-new
  }
})();
