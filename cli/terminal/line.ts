/**
 * The input line of the interactive terminal: its text, the cursor, and the keys that edit
 * them (arrows, Home/End, Backspace/Delete, Ctrl-A/E/U/K/W, typed or pasted text). What the
 * line is for (chat, an edit, a reason, a form field) is the terminal's business (tty.ts).
 */

/** A key as node:readline's keypress event describes it. */
export interface Key {
  name?: string | undefined;
  ctrl?: boolean | undefined;
  meta?: boolean | undefined;
  shift?: boolean | undefined;
  sequence?: string | undefined;
}

export class LineEditor {
  buffer = "";
  cursor = 0;

  /** Replaces the text and puts the cursor at its end. */
  set(buffer: string): void {
    this.buffer = buffer;
    this.cursor = buffer.length;
  }

  /** A window of `room` characters of the text that contains the cursor, and the cursor's column in it. */
  window(room: number): { shown: string; column: number } {
    const start = Math.max(0, Math.min(this.cursor - Math.floor(room * 0.7), this.buffer.length - room + 1));
    const shown = this.buffer.slice(Math.max(0, start), Math.max(0, start) + room);
    return { shown, column: this.cursor - Math.max(0, start) };
  }

  /** Line editing; true when the buffer or cursor changed. */
  edit(str: string | undefined, key: Key): boolean {
    switch (key.name) {
      case "backspace":
        if (this.cursor === 0) return false;
        this.buffer = this.buffer.slice(0, this.cursor - 1) + this.buffer.slice(this.cursor);
        this.cursor--;
        return true;
      case "delete":
        this.buffer = this.buffer.slice(0, this.cursor) + this.buffer.slice(this.cursor + 1);
        return true;
      case "left":
        this.cursor = Math.max(0, this.cursor - 1);
        return true;
      case "right":
        this.cursor = Math.min(this.buffer.length, this.cursor + 1);
        return true;
      case "home":
        this.cursor = 0;
        return true;
      case "end":
        this.cursor = this.buffer.length;
        return true;
    }
    if (key.ctrl) {
      if (key.name === "a") this.cursor = 0;
      else if (key.name === "e") this.cursor = this.buffer.length;
      else if (key.name === "u") [this.buffer, this.cursor] = [this.buffer.slice(this.cursor), 0];
      else if (key.name === "k") this.buffer = this.buffer.slice(0, this.cursor);
      else if (key.name === "w") {
        const before = this.buffer.slice(0, this.cursor).replace(/\S+\s*$/, "");
        this.buffer = before + this.buffer.slice(this.cursor);
        this.cursor = before.length;
      } else return false;
      return true;
    }
    if (key.meta || str === undefined || str === "") return false;
    // Printable text only (a paste may bring several characters at once).
    const text = str.replace(/[\x00-\x1f\x7f]/g, "");
    if (!text) return false;
    this.buffer = this.buffer.slice(0, this.cursor) + text + this.buffer.slice(this.cursor);
    this.cursor += text.length;
    return true;
  }
}
