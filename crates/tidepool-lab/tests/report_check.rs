//! The report as a person sees it: `report.html` rendered by headless
//! Chromium, measured in the browser, and photographed.
//!
//! Run by `bin/report-check.sh`, which installs Chromium if need be and
//! makes a report; ignored in the plain test suite, which has no browser
//! (the same geometry is checked there without one, in `quick.rs`, from the
//! SVG the lab writes).
//!
//! Environment: `TIDEPOOL_REPORT_DIR` (holds `report.html`),
//! `TIDEPOOL_REPORT_SHOTS` (where the PNGs go), `CHROMIUM` (the binary).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The first screen: a laptop's browser window.
const SCREEN: (u32, u32) = (1280, 800);

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap_or_else(|| panic!("{name} is not set")))
}

/// Runs Chromium headless on `url` with `extra` flags, a fresh profile and
/// no background traffic; kills it after 120 s. Returns its stdout.
fn chromium(extra: &[String], url: &str) -> String {
    let bin = env_path("CHROMIUM");
    let profile = std::env::temp_dir().join(format!(
        "tidepool-report-check-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&profile).unwrap();
    let mut child = Command::new(&bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {}: {e}", bin.display()));
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 120 s on {url}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&profile);
    reader.join().unwrap()
}

/// In-page measurement: written into a copy of the report (the report
/// itself has no script), run on load, read back from `--dump-dom`.
const MEASURE: &str = r#"<script>
(function () {
  function box(e) {
    var b = e.getBoundingClientRect();
    return { x: b.left + scrollX, y: b.top + scrollY, w: b.width, h: b.height };
  }
  function within(a, b) {
    return a.x >= b.x - 0.75 && a.y >= b.y - 0.75 &&
      a.x + a.w <= b.x + b.w + 0.75 && a.y + a.h <= b.y + b.h + 0.75;
  }
  function meets(a, b) {
    return a.x < b.x + b.w - 0.5 && b.x < a.x + a.w - 0.5 &&
      a.y < b.y + b.h - 0.5 && b.y < a.y + a.h - 0.5;
  }
  var out = {
    viewport: { w: innerWidth, h: innerHeight },
    page: { w: document.documentElement.scrollWidth, h: document.documentElement.scrollHeight },
    summary: box(document.querySelector('table.summary')),
    summaryRows: document.querySelectorAll('table.summary tbody tr').length,
    sections: [], plots: [], overflowing: []
  };
  document.querySelectorAll('body > section, body > header').forEach(function (s) {
    var b = box(s); b.id = s.id; out.sections.push(b);
  });
  document.querySelectorAll('td, th, p, h1, h2, h3, li, blockquote').forEach(function (e) {
    if (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible') {
      out.overflowing.push(e.tagName + ': ' + e.textContent.slice(0, 60));
    }
  });
  document.querySelectorAll('svg.plot').forEach(function (svg) {
    var p = { section: svg.closest('section').id, title: '', problems: [], texts: 0 };
    var t = svg.querySelector('text.title'); if (t) p.title = t.textContent;
    var area = svg.querySelector('rect.plot-area');
    var legend = svg.querySelector('g.legend');
    var xl = svg.querySelector('text.axis-label.x');
    var yl = svg.querySelector('text.axis-label.y');
    if (!area) p.problems.push('no plot area');
    if (!legend) p.problems.push('no legend');
    [['x', xl], ['y', yl]].forEach(function (a) {
      if (!a[1]) p.problems.push('no ' + a[0] + ' axis label');
      else if (!/\([^()]+\)$/.test(a[1].textContent.trim()))
        p.problems.push(a[0] + ' axis label without a unit: ' + a[1].textContent);
    });
    var texts = svg.querySelectorAll('text');
    p.texts = texts.length;
    texts.forEach(function (e) {
      if (!e.textContent.trim()) return;
      var holder = e.parentNode.closest('svg');
      if (!within(box(e), box(holder)))
        p.problems.push('text clipped: "' + e.textContent + '"');
    });
    if (area && legend) {
      var lb = box(legend), ab = box(area);
      if (meets(lb, ab)) p.problems.push('legend overlaps the plot area');
      svg.querySelectorAll('polyline, path, line, circle').forEach(function (d) {
        if (legend.contains(d) || d.closest('g.legend')) return;
        var db = box(d);
        if (db.w + db.h > 0 && meets(lb, db) && !legend.contains(d))
          p.problems.push('legend overlaps a drawn element (' + d.tagName + ')');
      });
      texts.forEach(function (e) {
        if (legend.contains(e) || !e.textContent.trim()) return;
        if (meets(lb, box(e))) p.problems.push('legend overlaps text "' + e.textContent + '"');
      });
    }
    [xl, yl, t].forEach(function (label) {
      if (!label) return;
      texts.forEach(function (e) {
        if (e === label || !e.textContent.trim()) return;
        if (meets(box(label), box(e)))
          p.problems.push('"' + label.textContent + '" overlaps "' + e.textContent + '"');
      });
    });
    out.plots.push(p);
  });
  var pre = document.createElement('pre');
  pre.id = 'tidepool-measure';
  pre.textContent = 'MEASURE:' + btoa(unescape(encodeURIComponent(JSON.stringify(out)))) + ':END';
  document.body.appendChild(pre);
})();
</script>"#;

fn decode_base64(s: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in s.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base64") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

fn measure(page: &Path, work: &Path) -> serde_json::Value {
    let html = std::fs::read_to_string(page).unwrap();
    let probe = work.join("measure.html");
    std::fs::write(
        &probe,
        html.replace("</body>", &format!("{MEASURE}</body>")),
    )
    .unwrap();
    let dom = chromium(
        &[
            format!("--window-size={},{}", SCREEN.0, SCREEN.1),
            "--dump-dom".to_owned(),
        ],
        &format!("file://{}", probe.display()),
    );
    let mark = "id=\"tidepool-measure\">MEASURE:";
    let start = dom.find(mark).expect("the measurement ran") + mark.len();
    let end = dom[start..].find(":END").unwrap() + start;
    let json = String::from_utf8(decode_base64(&dom[start..end])).unwrap();
    std::fs::remove_file(&probe).unwrap();
    serde_json::from_str(&json).unwrap()
}

fn shot(page: &Path, png: &Path, size: (u32, u32)) {
    let _ = std::fs::remove_file(png);
    chromium(
        &[
            format!("--window-size={},{}", size.0, size.1),
            format!("--screenshot={}", png.display()),
        ],
        &format!("file://{}", page.display()),
    );
    assert!(png.exists(), "no screenshot at {}", png.display());
}

#[test]
#[ignore = "needs Chromium; bin/report-check.sh runs it"]
fn a_person_can_read_the_report() {
    let dir = env_path("TIDEPOOL_REPORT_DIR");
    let shots = env_path("TIDEPOOL_REPORT_SHOTS");
    std::fs::create_dir_all(&shots).unwrap();
    let page = dir.join("report.html");
    let m = measure(&page, &shots);
    let num = |v: &serde_json::Value| v.as_f64().unwrap();

    // Photographs: the first screen, the whole page, each section alone.
    let first = shots.join("first-screen.png");
    shot(&page, &first, SCREEN);
    println!("{}", first.display());
    let height = num(&m["page"]["h"]).ceil() as u32;
    let full = shots.join("full-page.png");
    shot(&page, &full, (SCREEN.0, height.min(16_000)));
    println!("{}", full.display());
    let html = std::fs::read_to_string(&page).unwrap();
    for s in m["sections"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        if id.is_empty() {
            continue;
        }
        let only = shots.join(format!("section-{id}.html"));
        let style = format!(
            "<style>body>header,body>section{{display:none!important}}\
             body>section#{id}{{display:block!important;border-top:0;margin:0}}\
             details{{display:block}}</style></head>"
        );
        std::fs::write(&only, html.replacen("</head>", &style, 1)).unwrap();
        let h = (num(&s["h"]).ceil() as u32 + 60).min(16_000);
        let png = shots.join(format!("section-{id}.png"));
        shot(&only, &png, (SCREEN.0, h));
        std::fs::remove_file(&only).unwrap();
        println!("{}", png.display());
    }

    // The summary table is on the first screen, whole.
    let summary = &m["summary"];
    let bottom = num(&summary["y"]) + num(&summary["h"]);
    println!(
        "summary table: {} rows, bottom at {bottom:.0} px of a {} px screen",
        m["summaryRows"], SCREEN.1
    );
    assert!(bottom <= f64::from(SCREEN.1), "summary ends at {bottom} px");
    assert!(
        m["summaryRows"].as_u64().unwrap() >= 5,
        "a row per seed at least"
    );
    // Nothing wider than the window, no cell cut off.
    assert!(
        num(&m["page"]["w"]) <= num(&m["viewport"]["w"]),
        "the page scrolls sideways: {}",
        m["page"]
    );
    assert_eq!(
        m["overflowing"].as_array().unwrap().len(),
        0,
        "{}",
        m["overflowing"]
    );

    // Every plot: axis labels with units, legend off the data, no text
    // clipped or overlapping a label.
    let plots = m["plots"].as_array().unwrap();
    assert!(!plots.is_empty());
    let mut problems = Vec::new();
    for p in plots {
        for problem in p["problems"].as_array().unwrap() {
            problems.push(format!("{} / {}: {}", p["section"], p["title"], problem));
        }
    }
    println!("{} plots measured", plots.len());
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
