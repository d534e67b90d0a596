import path from "node:path";
import { fileURLToPath } from "node:url";
import fc from "fast-check";
import { stringify } from "yaml";
import { describe, expect, it } from "vitest";
import {
  ConfigError,
  DEFAULT_CAPABILITIES,
  DEFAULT_LIMITS,
  DEFAULT_PRESENCE,
  DEFAULT_QUOTAS,
  DEFAULT_CALLS,
  defaultCapabilities,
  defaultVisibility,
  loadSpaceConfig,
  parseSpaceConfig,
  type SpaceConfig,
} from "../gateway/config/config.js";

const FIXTURES = path.join(path.dirname(fileURLToPath(import.meta.url)), "fixtures", "config");

const parse = (text: string, env: NodeJS.ProcessEnv = {}) => parseSpaceConfig(text, { file: "space.yaml", env });

/** The ConfigError's message, one issue per line. */
function errorOf(text: string, env: NodeJS.ProcessEnv = {}): string {
  try {
    parse(text, env);
  } catch (err) {
    expect(err).toBeInstanceOf(ConfigError);
    return (err as ConfigError).message;
  }
  throw new Error("expected a ConfigError");
}

const lines = (...ls: string[]) => `${ls.join("\n")}\n`;
const base = (...participantLines: string[]) => lines("space:", "  id: demo", "participants:", ...participantLines);

describe("valid files", () => {
  it("loads a file that sets every option", async () => {
    const config = await loadSpaceConfig(path.join(FIXTURES, "full.yaml"), { ALICE_TOKEN: "alice-secret" });
    expect(config).toEqual({
      file: path.join(FIXTURES, "full.yaml"),
      space: { id: "demo", name: "Demo space", description: "A space with every option set" },
      gateway: {
        host: "0.0.0.0",
        port: 7420,
        state_dir: path.join(FIXTURES, "state"),
        audit_flush_ms: 20,
        limits: {
          max_payload_bytes: 2048,
          max_depth: 32,
          max_buffered_bytes: 65536,
          rate_per_second: 12.5,
          rate_burst: 20,
          flood_strikes: 3,
          flood_window_ms: 1000,
          heartbeat_ms: 0,
          join_timeout_ms: 250,
          history: 0,
          max_connections: 50,
          operator_reserve: 2,
          max_per_address: 10,
          max_unauthenticated: 5,
          mcp_sessions: 8,
          mcp_idle_ms: 60000,
        },
        allowed_origins: ["https://console.example.com"],
        allowed_hosts: ["gateway.example.com"],
        notify: [
          {
            url: "https://hooks.example.com/mewgate",
            format: "slack",
            events: ["proposed"],
            headers: { Authorization: "Bearer hook-secret" },
          },
        ],
      },
      policy: { fallback: "deny", proposal_ttl_ms: 60000, expires_action: "keep", tool_checks: "ask", escalate: [] },
      groups: {},
      calls: {
        timeout_ms: 5000,
        max_timeout_ms: 60000,
        max_call_depth: 3,
        max_pending: 8,
        breaker_failures: 2,
        breaker_cooldown_ms: 1000,
        takeover_idle_ms: 600000,
      },
      quotas: {
        argument_bytes: 4096,
        pending_proposals: 3,
        pending_bytes: 65536,
        space_pending_proposals: 10,
        space_pending_bytes: 262144,
        grants: 2,
        space_grants: 20,
        audit_max_bytes: 2097152,
        audit_max_age_days: 7,
      },
      presence: { each_up_to: 50, summary_ms: 250 },
      defaults: { visibility: "addressed" },
      participants: {
        alice: {
          id: "alice",
          kind: "human",
          description: "The human at the terminal",
          token: "alice-secret",
          visibility: "all",
          echo: true,
          approvers: ["bob"],
          capabilities: [{ kind: "*" }],
        },
        bob: {
          id: "bob",
          kind: "agent",
          token: "bob-token-default",
          visibility: "addressed",
          echo: false,
          capabilities: [
            { kind: "chat" },
            {
              kind: "mcp/request",
              payload: { method: "tools/call", params: { name: "read_*" } },
              note: "extra keys in a capability are kept",
            },
          ],
          tools: { allow: ["fs/read_*"], ask: ["fs/*"], deny: ["fs/delete"] },
        },
        fs: {
          id: "fs",
          kind: "mcp",
          description: "Costs $0",
          visibility: "addressed",
          echo: false,
          capabilities: defaultCapabilities("mcp"),
        },
      },
      previews: {},
      guards: [],
      caps: [],
      costs: {},
    } satisfies SpaceConfig);
  });

  it("applies the defaults of every omitted key", async () => {
    const config = await loadSpaceConfig(path.join(FIXTURES, "minimal.yaml"), {});
    expect(config.space).toEqual({ id: "mini", name: "mini" });
    expect(config.gateway).toEqual({
      host: "127.0.0.1",
      port: 7420,
      state_dir: path.join(FIXTURES, ".mewgate"),
      audit_flush_ms: 50,
      limits: DEFAULT_LIMITS,
      allowed_origins: [],
      allowed_hosts: [],
      notify: [],
    });
    expect(config.policy).toEqual({
      fallback: "ask",
      proposal_ttl_ms: 600_000,
      expires_action: "reject",
      tool_checks: "warn",
      escalate: [],
    });
    expect(config.calls).toEqual(DEFAULT_CALLS);
    expect(config.quotas).toEqual(DEFAULT_QUOTAS);
    expect(config.presence).toEqual(DEFAULT_PRESENCE);
    expect(config.defaults).toBeUndefined();
    const { me, helper, files, cron } = config.participants;
    expect(me).toEqual({ id: "me", kind: "human", echo: false, visibility: "all", capabilities: [{ kind: "*" }] });
    expect(helper).toMatchObject({ kind: "agent", visibility: "all", capabilities: DEFAULT_CAPABILITIES.agent });
    expect(files).toMatchObject({ kind: "mcp", visibility: "addressed", capabilities: DEFAULT_CAPABILITIES.mcp });
    // `cron:` with nothing under it is a participant with every default.
    expect(cron).toEqual({
      id: "cron",
      kind: "service",
      echo: false,
      visibility: "all",
      capabilities: DEFAULT_CAPABILITIES.service,
    });
    expect(DEFAULT_CAPABILITIES.agent).toContainEqual({ kind: "mcp/request", payload: { method: "tools/list" } });
  });

  it("gives each participant its own copy of the default capabilities", () => {
    const config = parse(base("  a: {kind: agent}", "  b: {kind: agent}"));
    config.participants.a!.capabilities.push({ kind: "extra" });
    expect(config.participants.b!.capabilities).toEqual(DEFAULT_CAPABILITIES.agent);
    expect(Object.isFrozen(DEFAULT_CAPABILITIES.agent)).toBe(true);
    expect(defaultCapabilities("agent")).not.toBe(defaultCapabilities("agent"));
    expect(Object.isFrozen(defaultCapabilities("human"))).toBe(false);
  });

  it("uses space defaults for participants that set nothing, and a participant's own value first", () => {
    const config = parse(
      lines(
        "space: {id: demo}",
        "defaults:",
        "  visibility: addressed",
        "  capabilities: [{kind: chat}]",
        "participants:",
        "  h: {kind: human}",
        "  m: {kind: mcp, visibility: all, capabilities: [{kind: '*'}]}",
      ),
    );
    expect(config.participants.h).toMatchObject({ visibility: "addressed", capabilities: [{ kind: "chat" }] });
    expect(config.participants.m).toMatchObject({ visibility: "all", capabilities: [{ kind: "*" }] });
    expect(config.participants.h!.capabilities).not.toBe(config.defaults!.capabilities);
  });

  it("keeps participant ids that are also Object.prototype names apart from the prototype", () => {
    const config = parse(base("  constructor: {kind: human}"));
    expect(config.participants.constructor).toMatchObject({ id: "constructor", kind: "human" });
    expect(config.participants.toString).toBeUndefined();
  });

  it("accepts the bounds of each limit", () => {
    const config = parse(
      lines(
        "space: {id: a}",
        "gateway:",
        "  port: 0",
        "  limits: {max_payload_bytes: 67108864, heartbeat_ms: 100, history: 1000, rate_per_second: 0.5}",
        "participants: {x: }",
      ),
    );
    expect(config.gateway.port).toBe(0);
    expect(config.gateway.limits).toMatchObject({ max_payload_bytes: 67108864, heartbeat_ms: 100, history: 1000 });
  });

  it("exposes the per-kind visibility defaults", () => {
    expect(defaultVisibility("mcp")).toBe("addressed");
    expect(defaultVisibility("human")).toBe("all");
    expect(defaultVisibility("agent")).toBe("all");
    expect(defaultVisibility("service")).toBe("all");
  });
});

describe("${ENV} substitution", () => {
  it("substitutes values, applies defaults, and unescapes $$", () => {
    const config = parse(
      lines(
        "space:",
        "  id: ${SPACE}",
        "  name: '${MISSING:-Fallback} ${EMPTY:-empty-default} [${EMPTY}]'",
        "  description: |",
        "    costs $$5, home is ${HOME_DIR}, a lone $ stays",
        "gateway:",
        "  port: ${PORT}",
        '  host: "${HOST:-localhost}"',
        "participants:",
        "  a:",
        "    token: ${DIGITS}",
        "    echo: ${ECHO}",
        "    approvers:",
        "      - ${B}",
        "    # inside [ ] and { } a reference must be quoted: there { starts a mapping",
        "    capabilities: [{kind: chat, payload: {'${KEY}': '${B}'}}]",
        "  b: {}",
      ),
      { SPACE: "demo", EMPTY: "", HOME_DIR: "/home/me", PORT: "8080", DIGITS: "12345678", ECHO: "true", B: "b", KEY: "k" },
    );
    expect(config.space).toEqual({
      id: "demo",
      name: "Fallback empty-default []",
      description: "costs $5, home is /home/me, a lone $ stays\n",
    });
    expect(config.gateway.port).toBe(8080);
    expect(config.gateway.host).toBe("localhost");
    // A token made of digits stays a string; numeric and boolean fields take the string spelling.
    expect(config.participants.a).toMatchObject({ token: "12345678", echo: true, approvers: ["b"] });
    // Keys are never substituted.
    expect(config.participants.a!.capabilities).toEqual([{ kind: "chat", payload: { "${KEY}": "b" } }]);
  });

  it("reports an unset variable at its scalar, and does not also complain about the leftover text", () => {
    expect(errorOf(lines("space:", "  id: demo", "gateway:", "  port: ${PORT}", "participants:", "  a:", "    token: ${A_TOKEN}"))).toBe(
      [
        "space.yaml:4:9: gateway.port: environment variable PORT is not set",
        "space.yaml:7:12: participants.a.token: environment variable A_TOKEN is not set",
      ].join("\n"),
    );
  });

  it("rejects a malformed reference", () => {
    expect(errorOf(base("  a: {description: 'x ${1X} y'}", '  b: {description: "${OPEN"}'))).toBe(
      [
        'space.yaml:4:20: participants.a.description: invalid reference "${1X}"; use ${NAME}, ${NAME:-default}, or $$ for a literal $',
        'space.yaml:5:20: participants.b.description: invalid reference "${OPEN"; use ${NAME}, ${NAME:-default}, or $$ for a literal $',
      ].join("\n"),
    );
  });

  it("reads process.env by default", () => {
    process.env.MEWGATE_CONFIG_TEST_ID = "from-env";
    try {
      expect(parseSpaceConfig(base("  a:").replace("demo", "${MEWGATE_CONFIG_TEST_ID}"), { file: "s.yaml" }).space.id).toBe("from-env");
    } finally {
      delete process.env.MEWGATE_CONFIG_TEST_ID;
    }
  });
});

describe("errors", () => {
  it("points an unknown key at the key and suggests the nearest known one", () => {
    const text = base("  alice:", "    kind: human", "    visiblity: all");
    expect(errorOf(text)).toBe('space.yaml:6:5: participants.alice.visiblity: unknown key; did you mean "visibility"?');
  });

  it("lists the known keys when nothing is close", () => {
    expect(errorOf(base("  a:", "colour: red"))).toBe(
      "space.yaml:5:1: colour: unknown key; expected one of space, gateway, policy, guards, caps, costs, groups, calls, prices, quotas, presence, previews, defaults, mcpServers, participants, identity",
    );
    expect(errorOf(base("  a:", "participant: x"))).toBe('space.yaml:5:1: participant: unknown key; did you mean "participants"?');
  });

  it("reports a wrong enum value with the allowed ones", () => {
    expect(errorOf(base("  alice:", "    kind: human", "    visibility: everyone"))).toBe(
      'space.yaml:6:17: participants.alice.visibility: expected one of "all", "addressed", found "everyone"',
    );
    expect(errorOf(base("  a: {kind: robot}"))).toBe(
      'space.yaml:4:13: participants.a.kind: expected one of "human", "agent", "mcp", "service", found "robot"',
    );
  });

  it("says what type was expected and what was found", () => {
    expect(errorOf(lines("space: {id: demo}", "gateway:", "  port: abc", "participants: {a: }"))).toBe(
      'space.yaml:3:9: gateway.port: expected an integer from 0 to 65535, found "abc"',
    );
    expect(
      errorOf(
        base(
          "  a:",
          "    echo: maybe",
          "    description: 42",
          "    capabilities: [chat]",
          "    approvers: {b: 1}",
          "    tools: {allow: fs/*}",
        ),
      ),
    ).toBe(
      [
        'space.yaml:5:11: participants.a.echo: expected true or false, found "maybe"',
        "space.yaml:6:18: participants.a.description: expected a string, found 42",
        'space.yaml:7:20: participants.a.capabilities[0]: expected a capability mapping like {kind: "chat"}, found "chat"',
        'space.yaml:8:16: participants.a.approvers: expected a list, found {"b":1}',
        'space.yaml:9:20: participants.a.tools.allow: expected a list, found "fs/*"',
      ].join("\n"),
    );
  });

  it("reports out-of-range limits", () => {
    const text = lines(
      "space: {id: demo}",
      "gateway:",
      "  port: 70000",
      "  limits:",
      "    max_payload_bytes: 10",
      "    heartbeat_ms: 50",
      "    rate_per_second: 0",
      "    history: 1.5",
      "    join_timeout_ms: 3000000000",
      "participants: {a: }",
    );
    expect(errorOf(text)).toBe(
      [
        "space.yaml:3:9: gateway.port: expected an integer from 0 to 65535, found 70000",
        "space.yaml:5:24: gateway.limits.max_payload_bytes: expected an integer from 1024 to 67108864, found 10",
        "space.yaml:6:19: gateway.limits.heartbeat_ms: expected 0 (disabled) or an integer from 100 to 2147483647, found 50",
        "space.yaml:7:22: gateway.limits.rate_per_second: expected a number > 0, found 0",
        "space.yaml:8:14: gateway.limits.history: expected an integer from 0 to 1000, found 1.5",
        "space.yaml:9:22: gateway.limits.join_timeout_ms: expected an integer from 1 to 2147483647, found 3000000000",
      ].join("\n"),
    );
  });

  it("points a missing required key at the mapping that lacks it", () => {
    expect(errorOf(lines("space:", "  name: Demo", "participants: {a: }"))).toBe("space.yaml:1:1: space.id: required key is missing");
    expect(errorOf(lines("# a comment", "space: {id: demo}"))).toBe(
      "space.yaml:2:1: participants: expected at least one participant (under participants or mcpServers)",
    );
    expect(errorOf("")).toBe("space.yaml:1:1: space: required key is missing");
    expect(errorOf(lines("space: {id: demo}", "participants: {}"))).toBe(
      "space.yaml:2:15: participants: expected at least one participant (under participants or mcpServers)",
    );
  });

  it("refuses ids that read alike, naming both with line and column", () => {
    const why = "rename one, since ids that read alike could pass for each other";
    expect(errorOf(base("  files:", "    kind: mcp", "  fiIes:", "    kind: mcp"))).toBe(
      `space.yaml:6:3: participants.fiIes: "fiIes" reads like participant "files" (participants.files at 4:3); ${why}`,
    );
    // l/I/1, case, rn/m and 0/O, across participants and mcpServers; each later id names the first.
    expect(
      errorOf(
        lines(
          "space: {id: demo}",
          "participants:",
          "  files: {kind: mcp}",
          "  fi1es: {kind: mcp}",
          "  Files: {}",
          "  mail: {}",
          "mcpServers:",
          "  rnail: {command: x}",
          "  d0cs: {command: x}",
          "  dOcs: {command: x}",
        ),
      ),
    ).toBe(
      [
        `space.yaml:4:3: participants.fi1es: "fi1es" reads like participant "files" (participants.files at 3:3); ${why}`,
        `space.yaml:5:3: participants.Files: "Files" reads like participant "files" (participants.files at 3:3); ${why}`,
        `space.yaml:8:3: mcpServers.rnail: "rnail" reads like participant "mail" (participants.mail at 6:3); ${why}`,
        `space.yaml:10:3: mcpServers.dOcs: "dOcs" reads like participant "d0cs" (mcpServers.d0cs at 9:3); ${why}`,
      ].join("\n"),
    );
    // Distinct ids that merely share letters stay as they are.
    const ok = parse(
      base("  files: {}", "  fines: {}", "  li: {}", "  il: {}", "  fs: {}", "  fs2: {}", "  read_file: {}", "  read-file: {}"),
    );
    expect(Object.keys(ok.participants)).toEqual(["files", "fines", "li", "il", "fs", "fs2", "read_file", "read-file"]);
  });

  it("reports a bad participant id at its key", () => {
    expect(errorOf(base("  ok: {}", "  fs/tools:", "    kind: mcp", "  'a:b': {}"))).toBe(
      [
        'space.yaml:5:3: participants["fs/tools"]: expected a participant id (a letter or digit, then up to 63 letters, digits, "_", ".", "-"), found "fs/tools"',
        'space.yaml:7:3: participants["a:b"]: expected a participant id (a letter or digit, then up to 63 letters, digits, "_", ".", "-"), found "a:b"',
      ].join("\n"),
    );
    expect(errorOf(lines("space: {id: Demo_Space}", "participants: {a: }"))).toBe(
      'space.yaml:1:13: space.id: expected a space id (a-z or 0-9, then up to 63 of a-z, 0-9, "_", "-"), found "Demo_Space"',
    );
  });

  it("checks tokens and approvers across participants, without printing tokens", () => {
    const text = base(
      "  alice: {token: correct-horse}",
      "  bob: {token: correct-horse, approvers: [alcie, bob, zed]}",
      "  eve: {token: short}",
    );
    expect(errorOf(text)).toBe(
      [
        'space.yaml:5:16: participants.bob.token: same token as participant "alice"',
        'space.yaml:5:43: participants.bob.approvers[0]: unknown participant "alcie"; did you mean "alice"?',
        'space.yaml:5:55: participants.bob.approvers[2]: unknown participant "zed"',
        "space.yaml:6:16: participants.eve.token: expected a string of at least 8 characters, found 5 characters",
      ].join("\n"),
    );
    expect(errorOf(text)).not.toContain("correct-horse");
    expect(errorOf(base("  mallory: {token: 12345678}"))).toBe(
      "space.yaml:4:20: participants.mallory.token: expected a string of at least 8 characters, found a number (quote it to make it a string)",
    );
  });

  it("allows one primary agent per space", () => {
    const text = base("  a: {kind: agent, agent: {primary: true}}", "  b: {kind: agent, agent: {primary: true}}");
    expect(errorOf(text)).toBe('space.yaml:5:37: participants.b.agent.primary: "a" is already the primary agent; a space has one');
    expect(parse(base("  a: {kind: agent, agent: {primary: true}}")).participants["a"]!.agent!.primary).toBe(true);
  });

  it("checks gateway.cluster: the NATS address, the node's name, the lease and the advertised address", () => {
    const withCluster = (c: string) => lines("space: {id: demo}", `gateway: {cluster: ${c}}`, "participants:", "  alice: {kind: human}");
    expect(errorOf(withCluster('"http://x"'))).toBe(
      'space.yaml:2:11: gateway.cluster.url: expected a NATS server address like nats://127.0.0.1:4222, found "http://x"',
    );
    expect(errorOf(withCluster("{node: a}"))).toBe("space.yaml:2:11: gateway.cluster.url: required key is missing");
    expect(errorOf(withCluster("{url: nats://127.0.0.1:4222, node: 'a b'}"))).toMatch(
      /^space\.yaml:2:\d+: gateway\.cluster\.node: expected a node name of 1 to 64 of A-Z/,
    );
    expect(errorOf(withCluster("{url: nats://127.0.0.1:4222, lease_ms: 10}"))).toMatch(/^space\.yaml:2:\d+: gateway\.cluster\.lease_ms: /);
    expect(errorOf(withCluster("{url: nats://127.0.0.1:4222, advertise: 'ftp://x'}"))).toMatch(
      /^space\.yaml:2:\d+: gateway\.cluster\.advertise: expected an http:\/\/ or https:\/\/ URL/,
    );
    expect(errorOf(withCluster("{url: 'nats://127.0.0.1:4222; rm -rf /'}"))).toMatch(
      /gateway\.cluster\.url: expected a NATS server address/,
    );
    expect(parse(withCluster("nats://127.0.0.1:4222")).gateway.cluster).toEqual({
      url: "nats://127.0.0.1:4222",
      lease_ms: 1500,
      replicas: 1,
    });
    expect(errorOf(withCluster("{url: nats://127.0.0.1:4222, replicas: 7}"))).toMatch(
      /^space\.yaml:2:\d+: gateway\.cluster\.replicas: expected an integer from 1 to 5, found 7/,
    );
    expect(
      parse(withCluster("{url: 'nats://a:4222,nats://b:4222', node: n-1, lease_ms: 3000, advertise: 'http://10.0.0.5:7420'}")).gateway
        .cluster,
    ).toEqual({
      url: "nats://a:4222,nats://b:4222",
      node: "n-1",
      lease_ms: 3000,
      replicas: 1,
      advertise: "http://10.0.0.5:7420",
    });
  });

  it("checks where a server's roots come from, and lets it ask there and nowhere else", () => {
    const head = ["space: {id: demo}", "participants:", "  alice: {kind: human}", "mcpServers:"];
    expect(errorOf(lines(...head, "  fs: {command: x, roots: {from: alcie}}"))).toBe(
      'space.yaml:5:34: mcpServers.fs.roots.from: unknown participant "alcie"; did you mean "alice"?',
    );
    expect(errorOf(lines(...head, "  gh: {command: y, roots: 7}"))).toBe(
      "space.yaml:5:27: mcpServers.gh.roots: expected a list of root URIs, or {from: participant}, found 7",
    );
    const ok = parse(
      lines(
        "space: {id: demo}",
        "participants:",
        "  alice: {kind: human}",
        "mcpServers:",
        "  fs: {command: x, roots: {from: alice}, sampling: false}",
      ),
    );
    expect(ok.participants["fs"]!.mcp!.sampling).toBe(false);
    expect(ok.participants["fs"]!.capabilities).toContainEqual({ kind: "mcp/request", to: ["alice"], payload: { method: "roots/list" } });
  });

  it("reports YAML syntax errors at the position the parser gives", () => {
    expect(errorOf(lines("space:", "  id: demo", "participants: [a", "x: 'unclosed"))).toBe(
      [
        "space.yaml:4:1: Flow sequence in block collection must be sufficiently indented and end with a ]",
        "space.yaml:5:1: Missing closing 'quote",
      ].join("\n"),
    );
    expect(errorOf(lines("space: {id: demo}", "space: {id: again}"))).toBe("space.yaml:2:1: Map keys must be unique");
    expect(errorOf(lines("space: {id: demo}", "---", "participants: {}"))).toMatch(/^space\.yaml:2:1: Source contains multiple documents/);
  });

  it("reports every issue at once, in file order, with structured issues", () => {
    let error: ConfigError | undefined;
    try {
      parseSpaceConfig(lines("gateway:", "  prot: 1", "  host: 7", "participants:", "  a:", "    token: ${T}"), {
        file: "x/s.yaml",
        env: {},
      });
    } catch (err) {
      error = err as ConfigError;
    }
    expect(error).toBeInstanceOf(ConfigError);
    expect(error!.name).toBe("ConfigError");
    expect(error!.issues).toEqual([
      { file: "x/s.yaml", line: 1, column: 1, path: "space", message: "required key is missing" },
      { file: "x/s.yaml", line: 2, column: 3, path: "gateway.prot", message: 'unknown key; did you mean "port"?' },
      { file: "x/s.yaml", line: 3, column: 9, path: "gateway.host", message: "expected a host name or address, found 7" },
      { file: "x/s.yaml", line: 6, column: 12, path: "participants.a.token", message: "environment variable T is not set" },
    ]);
    expect(error!.message).toBe(
      [
        "x/s.yaml:1:1: space: required key is missing",
        'x/s.yaml:2:3: gateway.prot: unknown key; did you mean "port"?',
        "x/s.yaml:3:9: gateway.host: expected a host name or address, found 7",
        "x/s.yaml:6:12: participants.a.token: environment variable T is not set",
      ].join("\n"),
    );
  });

  it("survives alias cycles and alias bombs", () => {
    expect(errorOf(base("  a: &x [*x]"))).toBe("space.yaml:4:9: participants.a: expected a mapping, found a list");
    const bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"];
    for (let i = 1; i < 8; i++)
      bomb.push(
        `${"abcdefgh"[i]}: &${"abcdefgh"[i]} [${Array(10)
          .fill(`*${"abcdefgh"[i - 1]}`)
          .join(", ")}]`,
      );
    expect(errorOf(lines(...bomb))).toMatch(/^space\.yaml: cannot parse: /);
  });
});

describe("files", () => {
  it("resolves state_dir against the yaml's directory", () => {
    const at = (file: string, stateDir?: string) =>
      parseSpaceConfig(lines("space: {id: d}", ...(stateDir ? ["gateway:", `  state_dir: ${stateDir}`] : []), "participants: {a: }"), {
        file,
        env: {},
      }).gateway.state_dir;
    expect(at("/srv/spaces/space.yaml")).toBe("/srv/spaces/.mewgate");
    expect(at("/srv/spaces/space.yaml", "../state")).toBe("/srv/state");
    expect(at("/srv/spaces/space.yaml", "/var/lib/mewgate")).toBe("/var/lib/mewgate");
    expect(at("rel/space.yaml", "s")).toBe(path.resolve("rel", "s"));
  });

  it("reports a file that cannot be read", async () => {
    const missing = path.join(FIXTURES, "missing.yaml");
    await expect(loadSpaceConfig(missing, {})).rejects.toBeInstanceOf(ConfigError);
    await expect(loadSpaceConfig(missing, {})).rejects.toThrow(`${missing}: cannot read: no such file`);
    await expect(loadSpaceConfig(FIXTURES, {})).rejects.toMatchObject({
      message: `${FIXTURES}: cannot read: is a directory`,
      issues: [{ file: FIXTURES, line: 0, column: 0, path: "", message: "cannot read: is a directory" }],
    });
  });
});

describe("robustness", () => {
  const onlyConfigErrors = (text: string) => {
    try {
      parseSpaceConfig(text, { file: "fuzz.yaml", env: { SET: "1" } });
    } catch (err) {
      if (!(err instanceof ConfigError)) throw err;
      expect(err.issues.length).toBeGreaterThan(0);
    }
  };

  it("throws nothing but ConfigError for arbitrary text", () => {
    fc.assert(fc.property(fc.string({ unit: "binary", maxLength: 200 }), onlyConfigErrors), { numRuns: 300 });
  });

  it("throws nothing but ConfigError for YAML-shaped text", () => {
    const token = fc.constantFrom(
      "space",
      "id",
      "participants",
      "gateway",
      "limits",
      "port",
      "kind",
      "human",
      "mcp",
      "token",
      "capabilities",
      "payload",
      "defaults",
      "visibility",
      ":",
      ": ",
      "\n",
      "\n  ",
      "\n    ",
      "- ",
      "[",
      "]",
      "{",
      "}",
      ",",
      "'",
      '"',
      "#",
      "&a ",
      "*a",
      "!!str ",
      "|",
      ">",
      "${SET}",
      "${UNSET}",
      "$$",
      "${X:-1}",
      "0",
      "-1",
      "1e9",
      "null",
      "true",
      "~",
      "?",
      "---",
      "...",
      "\t",
      "a/b",
      "%YAML 1.2\n",
    );
    fc.assert(
      fc.property(
        fc.array(token, { maxLength: 60 }).map((t) => t.join("")),
        onlyConfigErrors,
      ),
      { numRuns: 500 },
    );
  });

  it("throws nothing but ConfigError for arbitrary values at known keys", () => {
    const value = fc.oneof(fc.jsonValue({ maxDepth: 2 }), fc.constantFrom("${SET}", "${UNSET}", "$$"));
    const doc = fc.record(
      {
        space: fc.oneof(value, fc.record({ id: value, name: value }, { requiredKeys: [] })),
        gateway: fc.oneof(
          value,
          fc.record(
            { port: value, host: value, limits: fc.dictionary(fc.constantFrom(...Object.keys(DEFAULT_LIMITS)), value) },
            { requiredKeys: [] },
          ),
        ),
        participants: fc.oneof(
          value,
          fc.dictionary(
            fc.string({ maxLength: 8 }),
            fc.oneof(value, fc.record({ kind: value, token: value, capabilities: value, approvers: value }, { requiredKeys: [] })),
          ),
        ),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(doc, (d) => onlyConfigErrors(stringify(d))),
      { numRuns: 300 },
    );
  });
});

describe("runtime sections", () => {
  it("turns a pasted mcpServers block into mcp participants and resolves paths beside the file", () => {
    const config = parseSpaceConfig(
      lines(
        "space: {id: demo}",
        "mcpServers:",
        "  fs:",
        "    command: npx",
        '    args: ["-y", "@modelcontextprotocol/server-filesystem", "/tmp"]',
        "    env: {DEBUG: '1'}",
        "  remote:",
        "    type: http",
        "    url: http://127.0.0.1:9000/mcp",
        "    headers: {Authorization: Bearer x}",
        "  off: {command: x, disabled: true}",
        "participants:",
        "  me: {kind: human}",
        "  bot:",
        "    kind: agent",
        "    agent: {provider: scripted, script: scripts/demo.yaml}",
        "  job:",
        "    run: {command: node, args: [job.js], cwd: jobs}",
      ),
      { file: "/srv/space/space.yaml", env: {} },
    );
    expect(config.participants.fs).toMatchObject({ kind: "mcp", visibility: "addressed", mcp: { command: "npx", env: { DEBUG: "1" } } });
    expect(config.participants.remote?.mcp).toEqual({
      type: "http",
      url: "http://127.0.0.1:9000/mcp",
      headers: { Authorization: "Bearer x" },
    });
    expect(config.participants.off).toBeUndefined();
    expect(config.participants.bot?.agent).toMatchObject({
      provider: "scripted",
      script: "/srv/space/scripts/demo.yaml",
      max_iterations: 8,
    });
    expect(config.participants.job?.run).toEqual({ command: "node", args: ["job.js"], cwd: "/srv/space/jobs" });
    expect(config.file).toBe("/srv/space/space.yaml");
  });

  it("refuses an mcp server with both or neither of command and url, and an id used twice", () => {
    expect(errorOf(lines("space: {id: d}", "mcpServers:", "  fs: {args: [x]}", "participants:", "  me: {}"))).toBe(
      "space.yaml:3:7: mcpServers.fs: give either command (stdio) or url (streamable HTTP)",
    );
    expect(errorOf(lines("space: {id: d}", "mcpServers:", "  me: {command: x}", "participants:", "  me: {}"))).toBe(
      'space.yaml:3:7: mcpServers.me: "me" is also under participants; give it one place',
    );
  });
});
