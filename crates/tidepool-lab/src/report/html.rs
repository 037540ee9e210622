//! `report.html`: one self-contained page (inline SVG plots; no scripts,
//! fonts or files beside it). The first screen is the per-seed summary;
//! then one section per scenario (what the seed found, in its own words,
//! the table, the claims, the plots); then the machine and the notes.

use std::fmt::Write as _;

use crate::policy::PolicyKind;
use crate::report::format;
use crate::report::plot::hex;
use crate::report::summary::Verdict;
use crate::report::table::{format_value, header};
use crate::report::{Report, ScenarioReport, SeedRow, SeedStatus};

fn esc(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "\
*{box-sizing:border-box}\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,'DejaVu Sans',sans-serif;\
max-width:1320px;margin:0 auto;padding:12px 20px 40px;color:#222;background:#fff}\
h1{font-size:21px;margin:4px 0 2px}h2{font-size:18px;margin:0 0 6px}\
h3{font-size:15px;margin:14px 0 4px}\
.meta{color:#555;margin:0 0 12px;font-size:13px}\
section{margin:0 0 28px}section.scenario{border-top:2px solid #ddd;padding-top:14px}\
table{border-collapse:collapse;margin:4px 0 8px}\
td,th{border:1px solid #d6d6d6;padding:3px 8px;vertical-align:top}\
th{background:#f3f3f3;text-align:left;font-weight:600}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
td.p{white-space:nowrap}\
table.summary{width:100%;table-layout:fixed;font-size:13.5px;line-height:1.3}table.summary td,table.summary th{padding:2px 8px}\
table.summary th.seed{background:#fbfbf6}\
table.summary th.seed small{display:block;font-weight:normal;color:#666;font-size:11.5px;\
line-height:1.25}table.summary td.na{white-space:normal}\
td.v{text-align:center;font-weight:bold;width:2.2em}\
td.pass{color:#08713f;background:#eaf7ef}td.fail{color:#b00020;background:#fdecee}\
td.unmeasured,td.na{color:#777}td.na{font-style:italic}\
.fine{color:#555;font-size:12.5px;margin:2px 0}\
.finding{margin:4px 0}\
blockquote{margin:6px 0;padding:4px 12px;border-left:4px solid #c9c08a;background:#fbfaf2}\
blockquote cite{display:block;font-style:normal;color:#666;font-size:12.5px}\
.sw{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:5px;\
vertical-align:-1px}\
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:10px;\
margin:8px 0}\
.plots svg{width:100%;height:auto;display:block;border:1px solid #eee}\
.fail{color:#a00}ul.notes{color:#444;font-size:13px;margin:4px 0;padding-left:20px}\
details{margin:4px 0}summary{cursor:pointer;color:#335}";

/// The whole page.
pub fn render(report: &Report) -> String {
    let mut h = String::new();
    let m = &report.machine;
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>tidepool-lab report</title><style>{STYLE}</style></head><body>\
         <header id=\"top\"><h1>tidepool-lab report</h1><p class=\"meta\">{kind} run · every \
         15 s period ÷ {scale} = {ms} · {rep} measured run(s) per policy, medians · {cpu}, \
         {cores} cores, {mem} GiB, Linux {kernel}, {build} build · \
         <a href=\"#about\">machine, notes</a></p></header>",
        kind = if report.quick { "quick" } else { "full" },
        scale = report.time_scale,
        ms = format::millis(15_000.0 / report.time_scale),
        rep = report.repeats,
        cpu = esc(&m.cpu_model),
        cores = m.cores,
        mem = (m.memory_mib + 512) / 1024,
        kernel = esc(&m.kernel),
        build = if m.optimized { "release" } else { "debug" },
    );
    summary(&mut h, report);
    for s in &report.scenarios {
        scenario(&mut h, s);
    }
    about(&mut h, report);
    h.push_str("</body></html>\n");
    h
}

fn verdict_cell(v: Verdict) -> String {
    let class = match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "fail",
        Verdict::Unmeasured => "unmeasured",
    };
    format!("<td class=\"v {class}\">{}</td>", v.mark())
}

fn summary(h: &mut String, report: &Report) {
    h.push_str(
        "<section id=\"summary\"><h2>Does the lab reproduce each seed, and does tidepool match \
         or beat the seed's policy?</h2><table class=\"summary\"><colgroup>\
         <col style=\"width:15em\"><col style=\"width:2.4em\"><col style=\"width:34%\">\
         <col style=\"width:8.5em\"><col style=\"width:8.5em\"><col></colgroup><thead><tr>\
         <th>seed</th><th></th><th>claim</th><th>seed's number</th><th>lab, this machine</th>\
         <th>✓ when</th></tr></thead><tbody>",
    );
    for row in &report.summary {
        seed_row(h, row);
    }
    h.push_str(
        "</tbody></table><p class=\"fine\">The seeds measured other machines, so the lab \
         compares ratios: each policy against another in the same run. Medians over the runs; \
         each claim links to its scenario, where the numbers are given in full with their \
         sources.</p></section>",
    );
}

fn seed_row(h: &mut String, row: &SeedRow) {
    let head = format!(
        "<th class=\"seed\" rowspan=\"{}\">{} {}<small>{}</small></th>",
        row.claims.len().max(1),
        esc(&row.seed),
        esc(&row.short),
        esc(&row.subject)
    );
    if row.claims.is_empty() {
        let why = match &row.status {
            SeedStatus::Measured => String::new(),
            _ => row.status_text(),
        };
        let _ = write!(
            h,
            "<tr>{head}<td class=\"v unmeasured\">–</td><td class=\"na\">{}</td>\
             <td colspan=\"3\" class=\"na\">seed: {}</td></tr>",
            esc(&why),
            esc(&row.published)
        );
        return;
    }
    for (i, c) in row.claims.iter().enumerate() {
        let _ = write!(
            h,
            "<tr>{}{}<td><a href=\"#{}\">{}</a></td><td class=\"n\" title=\"{}\">{}</td>\
             <td class=\"n\" title=\"{}\">{}</td><td>{}</td></tr>",
            if i == 0 { head.as_str() } else { "" },
            verdict_cell(c.verdict),
            esc(&c.scenario),
            esc(&c.claim),
            esc(&c.published_detail),
            esc(&c.published),
            esc(&c.measured_detail),
            esc(&c.measured),
            esc(&c.rule),
        );
    }
}

fn swatch(p: PolicyKind) -> String {
    format!(
        "<span class=\"sw\" style=\"background:{}\"></span>{}",
        hex(p),
        p.name()
    )
}

fn scenario(h: &mut String, s: &ScenarioReport) {
    let _ = write!(
        h,
        "<section class=\"scenario\" id=\"{id}\"><h2>{title}</h2><p class=\"finding\">{finding}</p>",
        id = esc(&s.id),
        title = esc(&s.title),
        finding = esc(&s.finding),
    );
    for q in &s.quotes {
        let _ = write!(
            h,
            "<blockquote>“{}”<cite>— {}</cite></blockquote>",
            esc(&q.text),
            esc(&q.source)
        );
    }
    let _ = write!(
        h,
        "<p>{} Period of every periodic policy: {}.</p>",
        esc(&s.workload),
        format::millis(s.reclaim_interval_ms)
    );
    if s.results.is_empty() {
        notes(h, &s.notes, true);
        h.push_str("</section>");
        return;
    }
    h.push_str("<table class=\"results\"><thead><tr><th>policy</th>");
    for c in &s.columns {
        let _ = write!(h, "<th>{}</th>", esc(&header(&c.label, c.format)));
    }
    h.push_str("<th>pressure signals received, per run</th></tr></thead><tbody>");
    for r in &s.results {
        let _ = write!(h, "<tr><td class=\"p\">{}</td>", swatch(r.policy));
        for c in &s.columns {
            let _ = write!(
                h,
                "<td class=\"n\">{}</td>",
                format_value(r.metric(&c.key), c.format)
            );
        }
        let per: Vec<String> = r
            .runs
            .iter()
            .map(|x| x.pressure.received.to_string())
            .collect();
        let _ = write!(h, "<td class=\"n\">{}</td></tr>", per.join(" · "));
    }
    h.push_str("</tbody></table>");
    let (raised, withheld) = s.machine_signals();
    let _ = write!(
        h,
        "<p class=\"fine\">Medians over the runs. Pressure signals: what each policy's pool \
         received (the seed policies have no pressure response: 0); meanwhile the machine's \
         sources raised {raised}, of which the lab's gate withheld {withheld} from the pools \
         (it is open only in the pressure scenario, from each run's signal on).</p>"
    );
    for r in &s.results {
        if let Some(f) = r.first_failure() {
            let _ = write!(
                h,
                "<p class=\"fail\">{}: {} failed creation(s) over all runs; the first at {} with \
                 {} VMAs: {}</p>",
                r.policy,
                r.failures,
                format::millis(f.t_ms),
                format::count(f.vmas as f64),
                esc(&f.message)
            );
        }
    }
    if !s.claims.is_empty() {
        h.push_str(
            "<h3>Claims</h3><table class=\"claims\"><thead><tr><th>seed</th><th></th>\
             <th>claim</th><th>seed's number</th><th>lab, this machine</th><th>✓ when</th></tr>\
             </thead><tbody>",
        );
        for c in &s.claims {
            let _ = write!(
                h,
                "<tr><td>{}</td>{}<td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&c.seed),
                verdict_cell(c.verdict),
                esc(&c.claim),
                esc(&c.published_detail),
                esc(&c.measured_detail),
                esc(&c.rule),
            );
        }
        h.push_str("</tbody></table>");
    }
    h.push_str("<div class=\"plots\">");
    for figure in &s.plots {
        match figure.render(s) {
            Ok(svg) => h.push_str(&svg),
            Err(e) => {
                let _ = write!(h, "<p class=\"fail\">plot failed: {}</p>", esc(&e));
            }
        }
    }
    h.push_str("</div>");
    if s.phases.len() > 1 {
        let names: Vec<String> = s
            .phases
            .iter()
            .enumerate()
            .map(|(i, p)| format!("<b>{}</b> {}", i + 1, esc(p)))
            .collect();
        let _ = write!(
            h,
            "<p class=\"fine\">Phases (numbered above each plot; the dashed lines in each \
             policy's colour mark where that policy's own median run entered them): {}.</p>",
            names.join(" · ")
        );
    }
    notes(h, &s.notes, false);
    h.push_str("<details><summary>parameters</summary><table>");
    for (k, v) in &s.params {
        let _ = write!(h, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(v));
    }
    h.push_str("</table></details></section>");
}

fn notes(h: &mut String, notes: &[String], open: bool) {
    if notes.is_empty() {
        return;
    }
    let _ = write!(
        h,
        "<details{}><summary>notes ({})</summary><ul class=\"notes\">",
        if open { " open" } else { "" },
        notes.len()
    );
    for n in notes {
        let _ = write!(h, "<li>{}</li>", esc(n));
    }
    h.push_str("</ul></details>");
}

fn about(h: &mut String, report: &Report) {
    let m = &report.machine;
    let _ = write!(
        h,
        "<section id=\"about\" class=\"scenario\"><h2>Machine, policies and notes</h2>\
         <table><tr><th>tool</th><td>{tool}</td></tr><tr><th>CPU</th><td>{cpu}</td></tr>\
         <tr><th>cores</th><td>{cores}</td></tr><tr><th>memory</th><td>{mem} MiB</td></tr>\
         <tr><th>kernel</th><td>Linux {kernel}</td></tr>\
         <tr><th>vm.max_map_count</th><td>{mmc}</td></tr><tr><th>page size</th><td>{page} B</td></tr>\
         <tr><th>PSI</th><td>{psi}</td></tr><tr><th>rustc</th><td>{rustc}</td></tr>\
         <tr><th>build</th><td>{build}</td></tr><tr><th>memory pressure</th><td>{iso}</td></tr>\
         </table><h3>Policies</h3><table>",
        tool = esc(&report.tool),
        cpu = esc(&m.cpu_model),
        cores = m.cores,
        mem = m.memory_mib,
        kernel = esc(&m.kernel),
        mmc = m.max_map_count,
        page = m.page_size,
        psi = if m.psi {
            "/proc/pressure/memory readable"
        } else {
            "not available"
        },
        rustc = esc(m.rustc.as_deref().unwrap_or("unknown")),
        build = if m.optimized { "release" } else { "debug" },
        iso = esc(&report.pressure_isolation),
    );
    for p in PolicyKind::EVERY {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td></tr>",
            swatch(p),
            esc(p.source())
        );
    }
    h.push_str("</table><h3>Notes</h3><ul class=\"notes\">");
    for n in &report.notes {
        let _ = write!(h, "<li>{}</li>", esc(n));
    }
    h.push_str("</ul></section>");
}
