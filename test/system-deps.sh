#!/usr/bin/env sh
# The Debian packages some tests drive: tmux (the interactive terminal), chromium (the
# web console, through playwright-core), nats-server (clusters). Installed only when
# missing, and only where apt-get may run (root), so a developer's machine is left alone.
missing=""
command -v tmux >/dev/null 2>&1 || missing="$missing tmux"
[ -x /usr/bin/chromium ] || missing="$missing chromium"
command -v nats-server >/dev/null 2>&1 || [ -x /usr/sbin/nats-server ] || missing="$missing nats-server"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing$missing (apt-get)"
  { apt-get update -qq >/dev/null && apt-get install -y -qq $missing >/dev/null; } || echo "warning: could not install$missing"
else
  echo "warning: the tests need$missing (apt-get install$missing)"
fi
exit 0
