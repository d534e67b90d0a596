/**
 * A bridge's sign-in to a `url:` server behind OAuth, as the server connection sees it
 * (server.ts): a `fetch` for the transport that adds the bearer token and, on a 401, finds
 * where tokens come from and refreshes (or fetches client credentials) before trying once
 * more; and `around`, which wraps a connection attempt that ended on a 401 (or a 403
 * `insufficient_scope`) with a sign-in and tries again, a bounded number of times.
 *
 * A sign-in is a card in the people's inboxes ("<server> needs you to sign in at <issuer>",
 * an MCP URL elicitation, so the console, the terminal and MCP clients all show it) with
 * the authorization link; the callback lands on the gateway (oauth-consent.ts). One
 * sign-in runs at a time; a call that meets a 401 while the server runs fails saying so and
 * starts one (at most one at a time, never a loop). Headless consent (`consent: auto`,
 * loopback issuers only) follows the link itself, for tests.
 *
 * `as: caller`: each request from the space runs (`run`, an AsyncLocalStorage the fetch
 * reads) as the person the gateway stamped it with, on that person's tokens only; the
 * connection and the listings the gateway makes for nobody go as the space. A call for
 * nobody, or for a person not signed in, is refused before it is sent (`actingFor`), and
 * that person alone gets a card.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Logger } from "pino";
import type { McpServerConfig, OAuthConfig } from "../../gateway/index.js";
import type { ParticipantClient } from "../client.js";
import { ConsentDesk, followConsent } from "./oauth-consent.js";
import { type Challenge, OAuthClient, OAuthFailure, parseChallenge, safe } from "./oauth.js";
import type { CredentialVault, Subject } from "./oauth-vault.js";

/** Sign-ins one connection attempt may go through before it fails. */
const MAX_ROUNDS = 3;
/** A person is asked again (their next call, after the card was answered or not delivered) at most this often. */
const REASK_MS = 2000;
/** A card stays in an inbox this long. */
const CARD_TIMEOUT_MS = 600_000;
/**
 * With `as: caller`, what only lists what the server offers goes as the connection does (the
 * space's sign-in): the gateway asks for the tools itself, for nobody. Anything else acts,
 * and acts for a person or not at all.
 */
const LISTING = new Set(["ping", "tools/list", "prompts/list", "resources/list", "resources/templates/list", "logging/setLevel"]);

/** What the bridge is given to sign in with (from `up` or `mewgate bridge`). */
/** A refusal only a person's sign-in mends: none held (or it failed), or one with more scope. */
export type SignInRefusal = "sign_in_needed" | "step_up_needed";

export interface OAuthBridgeOptions {
  vault: CredentialVault;
  /** The space's id: the callback route names it. */
  space: string;
  /** The gateway's desk (in-process); without one a private desk serves headless consent only. */
  desk?: ConsentDesk | undefined;
  /** The gateway's callback URL for this space (`<gateway>/oauth/callback/<space>`). */
  redirectUri?: string | undefined;
  /** The URL of the gateway's client ID metadata document for a server (oauth-client-document.ts), if it may serve as a client_id. */
  clientMetadataUrl?: ((server: string) => string | undefined) | undefined;
  /** Overrides space.yaml's `oauth.consent` (`mewgate bridge --oauth-consent auto`). */
  consent?: "link" | "auto" | undefined;
  fetch?: typeof fetch | undefined;
  /** A sign-in is needed: the link, from the start on (the bridge's `signin` event only once `startBridge` returned). */
  onSignIn?: ((info: { server: string; issuer: string; url: string }) => void) | undefined;
}

export interface SignInHost {
  readonly id: string;
  readonly participant: ParticipantClient;
  readonly log: Logger | undefined;
  /** A sign-in is needed: the link for the terminal (`up` prints it). */
  onSignIn(info: { issuer: string; url: string }): void;
  readonly stopping: boolean;
}

interface Need {
  challenge: Challenge;
  fatal?: Error | undefined;
}

const DEFAULTS: Exclude<OAuthConfig, undefined | false> = { as: "space", consent: "link", grant: "authorization_code" };

export class UpstreamAuth {
  readonly client: OAuthClient;
  private readonly config: Exclude<OAuthConfig, undefined | false>;
  private readonly desk: ConsentDesk;
  private readonly consent: "link" | "auto";
  private need: Need | undefined;
  private connecting = 0;
  /** One sign-in at a time per subject (the space, or one person with `as: caller`). */
  private readonly signing = new Map<Subject, Promise<void>>();
  /** A person's sign-in under way: shows its card again where it is not shown (oauth-signin `cards`). */
  private readonly reasks = new Map<Subject, () => void>();
  /** The subject of the request under way (`run`): a person's call; outside any, the space (the connection). */
  private readonly acting = new AsyncLocalStorage<Subject>();
  private readonly stopped = new AbortController();
  private readonly base: typeof fetch;

  constructor(
    server: McpServerConfig,
    private readonly opts: OAuthBridgeOptions,
    private readonly host: SignInHost,
  ) {
    this.config = server.oauth ? server.oauth : DEFAULTS;
    this.consent = opts.consent ?? this.config.consent;
    this.desk = opts.desk ?? new ConsentDesk();
    this.base = opts.fetch ?? fetch;
    this.client = new OAuthClient({
      server: host.id,
      url: server.url!,
      config: this.config,
      vault: opts.vault,
      redirectUri: opts.redirectUri,
      clientSecret: readSecret(this.config.client_secret, "client_secret"),
      privateKey: readSecret(this.config.private_key, "private_key"),
      clientMetadataUrl: this.config.client_metadata_url ?? opts.clientMetadataUrl?.(host.id),
      log: host.log,
      fetch: this.base,
    });
  }

  /** Whose credentials a request uses: the person's whose call is under way (`run`), else the space's (the connection). */
  private subject(): Subject {
    return this.acting.getStore() ?? "space";
  }

  /**
   * Whose credentials a request from the space uses. `as: space`: the space's. `as: caller`:
   * the person the gateway stamped it with (`_meta["mewgate/person"]`), and theirs only; a
   * call for nobody, or for a person who has not signed in, is refused at once, and in the
   * second case a card asks that person (and nobody else) to sign in, so their next call works.
   */
  actingFor(method: string, person: unknown): { subject: Subject } | { refusal: string } {
    if (this.config.as !== "caller" || LISTING.has(method)) return { subject: "space" };
    if (typeof person !== "string" || person === "")
      return {
        refusal: `${this.host.id} signs in as each person (oauth as: caller), and this ${printable(method)} acts for nobody (an agent's call that no person approved); hold the tool in policy so that its approver's sign-in is used`,
      };
    const subject: Subject = `caller:${person}`;
    // Unattended (headless consent, tests), the request's own 401 signs the person in (fetch).
    if (this.client.tokens(subject) || this.unattended) return { subject };
    this.reasks.get(subject)?.();
    void this.signIn({}, subject).catch((err) => this.host.log?.warn({ err: (err as Error).message }, "sign-in failed"));
    return {
      refusal: `${this.host.id} signs in as each person (oauth as: caller), and ${printable(person)} has not signed in${this.where()}; a card asks ${printable(person)} to sign in, then call again`,
    };
  }

  /** The refusals this fetch wrote lately (`saying`), by their words: what forward.ts asks `refusalOf`. */
  private readonly said = new Map<string, SignInRefusal>();

  /**
   * Whether a failed request's error (the transport puts the body in its message) is a
   * refusal this fetch wrote, and which: a sign-in needed, or a sign-in with more scope
   * (step-up). A caller can act on either (a structured denial at the MCP face).
   */
  refusalOf(message: string): SignInRefusal | undefined {
    for (const [text, kind] of this.said) if (message.includes(text)) return kind;
    return undefined;
  }

  /** Runs `request` (one request to the server) with `subject`'s credentials. */
  run<T>(subject: Subject, request: () => T): T {
    return this.acting.run(subject, request);
  }

  /** Who a sign-in card goes to: the people in the space, or the one person whose sign-in it is. */
  private asks(subject: Subject): string {
    return subject === "space" ? "the people in the space" : printable(subject.slice("caller:".length));
  }

  /**
   * The transport's fetch: the bearer token on every request. A 401 is refreshed (or
   * client credentials fetched) and tried once more; a 403 `insufficient_scope` asks for
   * the wider scope. When no person is needed for that (headless consent, a service
   * account) the request waits for it and is tried again, at most MAX_ROUNDS times; else
   * it fails saying a sign-in is needed, and a card asks (a start waits in `around`).
   */
  readonly fetch = async (input: string | URL | Request, init: RequestInit = {}): Promise<Response> => {
    const subject = this.subject();
    let held = this.client.tokens(subject);
    let res = await this.base(input, withBearer(init, held?.access_token));
    for (let round = 0; ; round++) {
      const challenge = parseChallenge(res);
      const scoped = res.status === 403 && challenge.error === "insufficient_scope";
      if (res.status !== 401 && !scoped) return res;
      if (!scoped && round === 0) {
        const retry = await this.recover(subject, challenge, held?.access_token);
        if (retry) {
          await res.body?.cancel().catch(() => {});
          held = this.client.tokens(subject);
          res = await this.base(input, withBearer(init, retry));
          continue;
        }
      }
      const need: Need = { challenge: scoped ? { ...challenge, scope: widen(held?.scope, challenge.scope) } : challenge };
      if (this.unattended && this.connecting === 0 && round < MAX_ROUNDS) {
        try {
          await this.signIn(need.challenge);
        } catch (err) {
          this.host.log?.warn({ err: (err as Error).message }, "sign-in failed");
          return this.saying(
            res,
            `${this.host.id}: the sign-in${this.where()} failed: ${printable((err as Error).message)}`,
            "sign_in_needed",
          );
        }
        await res.body?.cancel().catch(() => {});
        held = this.client.tokens(subject);
        res = await this.base(input, withBearer(init, held?.access_token));
        continue;
      }
      this.needs(need);
      return scoped
        ? this.saying(
            res,
            `${this.host.id} needs a sign-in with more scope (${printable(need.challenge.scope ?? "")})${this.where()}; a card asks ${this.asks(subject)}`,
            "step_up_needed",
          )
        : this.saying(res, `${this.host.id} needs a sign-in${this.where()}; a card asks ${this.asks(subject)}`, "sign_in_needed");
    }
  };

  /** A sign-in needs no person: headless consent, or a service account. */
  private get unattended(): boolean {
    return this.consent === "auto" || this.config.grant === "client_credentials";
  }

  private where(): string {
    const issuer = this.client.issuer;
    return issuer ? ` at ${safe(issuer)}` : "";
  }

  /** The refusal with our words as its body (the transport puts the body in the error a caller reads; the server's may say anything). */
  private async saying(res: Response, text: string, kind: SignInRefusal): Promise<Response> {
    if (this.said.size >= 64) this.said.delete(this.said.keys().next().value!);
    this.said.set(text, kind);
    await res.body?.cancel().catch(() => {});
    return new Response(text, { status: res.status, statusText: res.statusText, headers: { "content-type": "text/plain" } });
  }

  /** A token to try again with after a 401, or undefined. */
  private async recover(subject: Subject, challenge: Challenge, used: string | undefined): Promise<string | undefined> {
    try {
      await this.client.discover(challenge);
      const now = this.client.tokens(subject);
      // Found in the vault once discovery named the issuer (a restart), or another request refreshed it.
      if (now && now.access_token !== used) return now.access_token;
      if (now?.refresh_token && (await this.client.refresh(subject))) return this.client.tokens(subject)?.access_token;
      if (this.config.grant === "client_credentials") {
        await this.client.clientCredentials(challenge);
        return this.client.tokens(subject)?.access_token;
      }
    } catch (err) {
      this.needs({ challenge, fatal: err as Error });
    }
    return undefined;
  }

  /** A 401 or 403 that only a sign-in mends: a connection attempt waits for it; a call fails and a sign-in starts. */
  private needs(need: Need): void {
    const subject = this.subject();
    // A person's call is not the connection: a start under way waits for the space's sign-in only.
    if (subject === "space") this.need ??= need;
    if (need.fatal) {
      this.host.log?.warn({ err: need.fatal.message }, "cannot sign in to the MCP server");
      return;
    }
    // Unattended, the request itself already tried (fetch); a person is asked once, in the background.
    if (subject !== "space") this.reasks.get(subject)?.();
    if ((this.connecting === 0 || subject !== "space") && !this.unattended)
      void this.signIn(need.challenge, subject).catch((err) => this.host.log?.warn({ err: (err as Error).message }, "sign-in failed"));
  }

  /** Runs `attempt` (a connection); after a 401 or 403 a person signs in, and it is tried again. */
  around<T>(attempt: () => Promise<T>): Promise<T> {
    // A connection is the space's, never a person's: a restart scheduled while a person's call
    // was under way (a 401 that broke the transport) would otherwise run on that person's tokens.
    return this.acting.run("space", () => this.attempts(attempt));
  }

  private async attempts<T>(attempt: () => Promise<T>): Promise<T> {
    this.connecting++;
    try {
      for (let round = 0; ; round++) {
        this.need = undefined;
        try {
          return await attempt();
        } catch (err) {
          const need = this.need as Need | undefined;
          if (!need || this.host.stopping) throw err;
          if (need.fatal) throw need.fatal;
          if (round >= MAX_ROUNDS) throw new OAuthFailure(`still refused after ${round} sign-ins (${(err as Error).message})`);
          await this.signIn(need.challenge);
        }
      }
    } finally {
      this.connecting--;
    }
  }

  /** One sign-in at a time per subject: a card (or headless consent), then the callback. */
  signIn(challenge: Challenge, subject: Subject = this.subject()): Promise<void> {
    let running = this.signing.get(subject);
    if (!running) {
      running = this.runSignIn(challenge, subject).finally(() => this.signing.delete(subject));
      this.signing.set(subject, running);
    }
    return running;
  }

  private async runSignIn(challenge: Challenge, subject: Subject): Promise<void> {
    if (this.config.grant === "client_credentials") return this.client.clientCredentials(challenge);
    const pending = await this.client.begin(subject, challenge);
    let settle!: { resolve: () => void; reject: (e: Error) => void };
    const done = new Promise<void>((resolve, reject) => (settle = { resolve, reject }));
    // Headless consent reports a failed callback itself; this one is awaited only once it could matter.
    done.catch(() => {});
    const expected = this.desk.expect(
      this.opts.space,
      pending.state,
      async (url) => {
        try {
          await this.client.complete(pending, url);
          settle.resolve();
        } catch (err) {
          settle.reject(err as Error);
          throw err;
        }
      },
      { authorizationUrl: pending.authorizationUrl, redirectUri: pending.redirectUri },
    );
    const cards = new AbortController();
    const onStop = () => settle.reject(new Error("the bridge stopped while waiting for a sign-in"));
    this.stopped.signal.addEventListener("abort", onStop, { once: true });
    // A person's card left unanswered ends with it, so that their next call asks again.
    const expiry =
      subject === "space"
        ? undefined
        : setTimeout(() => settle.reject(new Error("the sign-in card was not answered in time")), CARD_TIMEOUT_MS);
    expiry?.unref();
    try {
      if (this.consent === "auto") {
        // Headless: this process followed the authorization URL itself; nobody else held a link.
        const back = await followConsent(pending.authorizationUrl, pending.redirectUri, this.base);
        const r = await this.desk.deliver(this.opts.space, back);
        if (!r.ok) throw new OAuthFailure(r.message);
      } else {
        this.host.log?.info({ issuer: pending.issuer, subject }, "the MCP server needs a sign-in; asking with a card");
        // The card carries the desk's single-use start link, never the authorization URL (oauth-consent.ts).
        // A person's own link goes to that person only: not to the terminal, not to anyone else's inbox.
        if (subject === "space") {
          this.host.onSignIn({ issuer: pending.issuer, url: expected.link });
          this.opts.onSignIn?.({ server: this.host.id, issuer: pending.issuer, url: expected.link });
        }
        this.cards(pending.issuer, expected.link, cards.signal, subject);
      }
      await done;
      this.host.log?.info({ issuer: pending.issuer, subject }, "signed in to the MCP server");
    } finally {
      clearTimeout(expiry);
      expected.forget();
      cards.abort();
      this.stopped.signal.removeEventListener("abort", onStop);
    }
  }

  /**
   * The card, to every person present and to whoever comes while it is open; a person's own
   * sign-in to that person only, wherever they are: connected, or with only the web console
   * open (the gateway lets a console answer what is asked of it). It is a URL elicitation,
   * which the gateway delivers to its addressee alone, whatever anyone's visibility. Asked
   * again when the person connects anew (the card went to the connection they left) and when
   * they call again while it is unanswered or was not delivered (`reask`).
   */
  private cards(issuer: string, url: string, signal: AbortSignal, subject: Subject): void {
    const { participant } = this.host;
    const only = subject === "space" ? undefined : subject.slice("caller:".length);
    const isFor = (p: { id: string; kind?: string | undefined }) => p.kind === "human" && (only === undefined || p.id === only);
    const message = `${this.host.id} needs you to sign in at ${safe(issuer)}`;
    const asked = new Map<string, AbortController>();
    const last = new Map<string, number>();
    const ask = (id: string, again = false) => {
      if (signal.aborted) return;
      const had = asked.get(id);
      // Shown, or just answered: a flood of calls (or of 401s) asks at most once a while.
      if (!again && (had || Date.now() - (last.get(id) ?? 0) < REASK_MS)) return;
      last.set(id, Date.now());
      had?.abort();
      const mine = new AbortController();
      asked.set(id, mine);
      const params = { mode: "url", message, url, elicitationId: randomUUID() };
      participant
        .request(id, "elicitation/create", params, {
          timeoutMs: CARD_TIMEOUT_MS,
          signal: AbortSignal.any([signal, mine.signal]),
          chain: false,
        })
        .then(
          () => {},
          (err: Error) => {
            if (!signal.aborted && !mine.signal.aborted)
              this.host.log?.info({ to: id, err: err.message }, "the sign-in card was not shown");
          },
        )
        // Answered, declined or undelivered: the person's next call (or connection) asks again.
        .finally(() => asked.get(id) === mine && asked.delete(id));
    };
    for (const p of participant.participants.values()) if (isFor(p)) ask(p.id);
    // Not connected, perhaps at the web console: asked all the same (refused when nowhere).
    if (only !== undefined) ask(only);
    const off = participant.on("presence", (e) => e.event === "join" && isFor(e.participant) && ask(e.participant.id, true));
    if (only !== undefined) this.reasks.set(subject, () => ask(only));
    signal.addEventListener(
      "abort",
      () => {
        off();
        if (only !== undefined) this.reasks.delete(subject);
      },
      { once: true },
    );
  }

  stop(): void {
    this.stopped.abort();
  }
}

/** A 403's scope added to what is held (step-up keeps what was granted). */
function widen(held: string | undefined, more: string | undefined): string | undefined {
  if (!more) return held;
  return [...new Set([...(held?.split(" ") ?? []), ...more.split(" ")].filter(Boolean))].join(" ");
}

function printable(s: string): string {
  const t = s.replace(/[\u0000-\u001f\u007f-\u009f]/g, "?");
  return t.length > 200 ? `${t.slice(0, 200)}…` : t;
}

function withBearer(init: RequestInit, token: string | undefined): RequestInit {
  if (!token) return init;
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${token}`);
  return { ...init, headers };
}

/** A client secret from space.yaml: text (after `${VAR}`), or the trimmed contents of its `secret_file`. */
function readSecret(secret: string | { secret_file: string } | undefined, key: string): string | undefined {
  if (secret === undefined || typeof secret === "string") return secret;
  try {
    return readFileSync(secret.secret_file, "utf8").trim();
  } catch (err) {
    throw new OAuthFailure(
      `cannot read oauth.${key}'s secret_file ${secret.secret_file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
}
