// The console's favicon: a dot with how many proposals wait, so a background tab shows it.

/** The favicon shows how many proposals wait. */
export function drawFavicon(link, n) {
  const c = document.createElement("canvas");
  c.width = c.height = 32;
  const g = c.getContext("2d");
  if (!g) return;
  g.fillStyle = n ? "#9a6700" : "#2a5bd7";
  g.beginPath();
  g.arc(16, 16, 15, 0, Math.PI * 2);
  g.fill();
  g.fillStyle = "#fff";
  g.font = "bold 18px sans-serif";
  g.textAlign = "center";
  g.textBaseline = "middle";
  g.fillText(n ? String(Math.min(n, 99)) : "m", 16, 17);
  link.href = c.toDataURL("image/png");
}
