/**
 * A TCP relay the fault tests put between a gateway node and nats-server: a loopback
 * server that pipes each connection to the target, and can hold everything in both
 * directions (`freeze`: the link hangs, no error on either side), let it go again
 * (`thaw`: what was held arrives), or reset every connection (`reset`: RST both ways).
 */
import { createServer, type Server, type Socket, connect } from "node:net";

interface Pair {
  client: Socket;
  upstream: Socket;
}

export class Relay {
  private readonly pairs = new Set<Pair>();
  private frozen = false;
  port = 0;

  private constructor(
    private readonly server: Server,
    private readonly targetPort: number,
  ) {}

  static async start(targetPort: number): Promise<Relay> {
    const server = createServer();
    const relay = new Relay(server, targetPort);
    server.on("connection", (client) => relay.accept(client));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", () => resolve()));
    relay.port = (server.address() as { port: number }).port;
    return relay;
  }

  get url(): string {
    return `nats://127.0.0.1:${this.port}`;
  }

  private accept(client: Socket): void {
    const upstream = connect(this.targetPort, "127.0.0.1");
    const pair = { client, upstream };
    this.pairs.add(pair);
    // By hand, not pipe(): a paused socket stays paused until thawed.
    client.on("data", (d) => upstream.write(d));
    upstream.on("data", (d) => client.write(d));
    const end = () => {
      this.pairs.delete(pair);
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
    if (this.frozen) {
      client.pause();
      upstream.pause();
    }
  }

  /** Holds every byte, both ways, on every connection (and on new ones) until `thaw` or `reset`. */
  freeze(): void {
    this.frozen = true;
    for (const p of this.pairs) {
      p.client.pause();
      p.upstream.pause();
    }
  }

  thaw(): void {
    this.frozen = false;
    for (const p of this.pairs) {
      p.client.resume();
      p.upstream.resume();
    }
  }

  /** Every connection reset (what was held is lost); new connections pass again. */
  reset(): void {
    this.frozen = false;
    for (const p of [...this.pairs]) {
      p.client.resetAndDestroy();
      p.upstream.resetAndDestroy();
    }
    this.pairs.clear();
  }

  async close(): Promise<void> {
    this.reset();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
