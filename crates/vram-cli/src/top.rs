//! `vram top`: live GPU memory per GPU and per process.
//!
//! Interactive by default (ratatui); `--once` prints one table, `--json`
//! prints one JSON object per sample (numbers as numbers, bytes not "MiB").

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{
    Axis, Block, Borders, Cell, Chart, Clear, Dataset, Gauge, GraphType, LineGauge, Paragraph, Row,
    Sparkline, Table, TableState,
};
use ratatui::Frame;
use vram_monitor::leak::{LeakConfig, LeakDetector};
use vram_monitor::view::{human_bytes, rows, ProcessRow, SortKey};
use vram_monitor::{History, Sample, Source};

use crate::monitor::{now_ms, open_source, parse_count, parse_interval, BadInput, SourceArgs};

/// Column to sort processes by.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default)]
pub enum SortArg {
    /// GPU memory, largest first.
    #[default]
    Memory,
    /// Process id.
    Pid,
    /// Owner.
    User,
    /// GPU index.
    Gpu,
    /// Command line.
    Command,
}

impl From<SortArg> for SortKey {
    fn from(s: SortArg) -> Self {
        match s {
            SortArg::Memory => SortKey::Memory,
            SortArg::Pid => SortKey::Pid,
            SortArg::User => SortKey::User,
            SortArg::Gpu => SortKey::Gpu,
            SortArg::Command => SortKey::Command,
        }
    }
}

/// Arguments of `vram top`.
#[derive(clap::Args, Debug, Clone)]
pub struct TopArgs {
    #[command(flatten)]
    pub source: SourceArgs,
    /// Print one table and exit.
    #[arg(long)]
    pub once: bool,
    /// Print one JSON object per sample, one per line (with --once: just one).
    #[arg(long)]
    pub json: bool,
    /// Stop after this many samples (--json).
    #[arg(long, value_parser = parse_count, requires = "json", conflicts_with = "once")]
    pub count: Option<u64>,
    /// Time between samples: 100ms, 1s, 2.5s (10ms to 1h).
    #[arg(long, default_value = "1s", value_parser = parse_interval)]
    pub interval: Duration,
    /// Sort processes by this column.
    #[arg(long, value_enum, default_value_t = SortArg::Memory)]
    pub sort: SortArg,
    /// Only show processes whose pid, user or command contains this text.
    #[arg(long, default_value = "")]
    pub filter: String,
}

/// Run `vram top`.
pub fn run(args: &TopArgs) -> anyhow::Result<()> {
    let mut source = open_source(&args.source)?;
    if args.json {
        let count = if args.once { Some(1) } else { args.count };
        return json_stream(&mut source, args.interval, count);
    }
    if args.once {
        let sample = source.sample(now_ms())?;
        let mut out = crate::output::stdout();
        out.write_all(table_text(&sample, &args.filter, args.sort.into()).as_bytes())?;
        return Ok(());
    }
    if !std::io::stdout().is_terminal() {
        return Err(BadInput("vram top needs a terminal; use --once or --json".into()).into());
    }
    let mut app = App::new(source.describe(), args);
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, &mut source, &mut app);
    ratatui::restore();
    result
}

fn json_stream(
    source: &mut dyn Source,
    interval: Duration,
    count: Option<u64>,
) -> anyhow::Result<()> {
    let mut out = crate::output::stdout();
    let mut n = 0;
    let mut next = Instant::now();
    while count.is_none_or(|c| n < c) {
        let s = source.sample(now_ms())?;
        writeln!(out, "{}", s.to_json_line())?;
        out.flush()?;
        n += 1;
        if count.is_none_or(|c| n < c) {
            next += interval;
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    }
    Ok(())
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// The `--once` table.
pub fn table_text(sample: &Sample, filter: &str, key: SortKey) -> String {
    let mut o = String::new();
    let name_w = sample
        .gpus
        .iter()
        .map(|g| g.name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    o.push_str(&format!(
        "{:<3} {:<name_w$} {:>21} {:>6} {:>5}\n",
        "GPU", "NAME", "MEMORY USED / TOTAL", "USED", "UTIL"
    ));
    for g in &sample.gpus {
        let mem = format!(
            "{} / {}",
            human_bytes(g.memory_used_bytes),
            human_bytes(g.memory_total_bytes)
        );
        let util = g.utilization_pct.map_or("n/a".into(), |u| format!("{u}%"));
        o.push_str(&format!(
            "{:<3} {:<name_w$} {:>21} {:>6} {:>5}\n",
            g.index,
            g.name,
            mem,
            pct(g.used_fraction()),
            util
        ));
        if let Some(n) = &g.note {
            o.push_str(&format!("    note: {n}\n"));
        }
    }
    let rs = rows(sample, filter, key, false);
    o.push('\n');
    o.push_str(&format!(
        "{:<3} {:>8} {:<10} {:>10} {:>6}  {}\n",
        "GPU", "PID", "USER", "GPU MEM", "SHARE", "COMMAND"
    ));
    for r in &rs {
        o.push_str(&format!(
            "{:<3} {:>8} {:<10} {:>10} {:>6}  {}\n",
            r.gpu,
            r.pid,
            r.user.chars().take(10).collect::<String>(),
            r.bytes.map_or("n/a".into(), human_bytes),
            pct(r.share),
            r.command
        ));
    }
    if rs.is_empty() {
        o.push_str("(no processes)\n");
    }
    o
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    List,
    Process { gpu: u32, pid: u32 },
}

/// State of the interactive screen.
#[derive(Debug)]
struct App {
    history: History,
    source: String,
    interval: Duration,
    sort: SortKey,
    descending: bool,
    filter: String,
    editing: bool,
    selected: usize,
    mode: Mode,
    help: bool,
    paused: bool,
}

impl App {
    fn new(source: String, args: &TopArgs) -> Self {
        App {
            history: History::new(600),
            source,
            interval: args.interval,
            sort: args.sort.into(),
            descending: false,
            filter: args.filter.clone(),
            editing: false,
            selected: 0,
            mode: Mode::List,
            help: false,
            paused: false,
        }
    }

    fn rows(&self) -> Vec<ProcessRow> {
        self.history
            .latest()
            .map(|s| rows(s, &self.filter, self.sort, self.descending))
            .unwrap_or_default()
    }

    /// Apply one key; returns true to quit.
    fn key(&mut self, k: KeyEvent) -> bool {
        if k.kind == KeyEventKind::Release {
            return false;
        }
        if k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL) {
            return true;
        }
        if self.editing {
            match k.code {
                KeyCode::Enter => self.editing = false,
                KeyCode::Esc => {
                    self.editing = false;
                    self.filter.clear();
                }
                KeyCode::Backspace => {
                    self.filter.pop();
                }
                KeyCode::Char(c) => self.filter.push(c),
                _ => {}
            }
            self.selected = 0;
            return false;
        }
        if self.help {
            self.help = false;
            return matches!(k.code, KeyCode::Char('q'));
        }
        let n = self.rows().len();
        match k.code {
            KeyCode::Char('q') => return true,
            KeyCode::Esc => match self.mode {
                Mode::Process { .. } => self.mode = Mode::List,
                Mode::List if !self.filter.is_empty() => self.filter.clear(),
                Mode::List => return true,
            },
            KeyCode::Char('?') | KeyCode::Char('h') => self.help = true,
            KeyCode::Down | KeyCode::Char('j') => {
                self.selected = (self.selected + 1).min(n.saturating_sub(1))
            }
            KeyCode::Up | KeyCode::Char('k') => self.selected = self.selected.saturating_sub(1),
            KeyCode::Home | KeyCode::Char('g') => self.selected = 0,
            KeyCode::End | KeyCode::Char('G') => self.selected = n.saturating_sub(1),
            KeyCode::Enter => {
                if let Some(r) = self.rows().get(self.selected) {
                    self.mode = Mode::Process {
                        gpu: r.gpu,
                        pid: r.pid,
                    };
                }
            }
            KeyCode::Char('s') => self.sort = self.sort.next(),
            KeyCode::Char('r') => self.descending = !self.descending,
            KeyCode::Char('/') => {
                self.editing = true;
            }
            KeyCode::Char('p') | KeyCode::Char(' ') => self.paused = !self.paused,
            _ => {}
        }
        false
    }
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    source: &mut dyn Source,
    app: &mut App,
) -> anyhow::Result<()> {
    let mut next = Instant::now();
    loop {
        if Instant::now() >= next {
            if !app.paused {
                app.history.push(source.sample(now_ms())?);
            }
            next = Instant::now() + app.interval;
        }
        terminal.draw(|f| draw(f, app))?;
        let wait = next.saturating_duration_since(Instant::now());
        if event::poll(wait)? {
            if let Event::Key(k) = event::read()? {
                if app.key(k) {
                    return Ok(());
                }
            }
        }
    }
}

const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values as block characters between the window's minimum
/// and maximum, so growth stands out; a flat series (range under 1/64 of its
/// maximum) draws as a flat mid line instead of amplified jitter.
fn trend(values: &[Option<u64>], width: usize) -> String {
    let tail = &values[values.len().saturating_sub(width)..];
    let max = tail.iter().flatten().copied().max().unwrap_or(0);
    let min = tail.iter().flatten().copied().min().unwrap_or(0);
    let range = max - min;
    tail.iter()
        .map(|v| match v {
            None => ' ',
            Some(_) if range == 0 || range < max / 64 => BLOCKS[3],
            Some(v) => BLOCKS[(((*v - min) as f64 / range as f64) * 7.0).round() as usize],
        })
        .collect()
}

fn draw(f: &mut Frame, app: &App) {
    let area = f.area();
    let Some(sample) = app.history.latest() else {
        f.render_widget(Paragraph::new("waiting for the first sample…"), area);
        return;
    };
    let n = sample.gpus.len() as u16;
    let full = area.height >= n * 5 + 9;
    let gpu_h = if full { n * 5 } else { n };
    let [head, gpus, body, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(gpu_h),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    // Memory sorts largest first naturally, the other columns ascending.
    let largest_first = (app.sort == SortKey::Memory) != app.descending;
    let dir = if largest_first { "↓" } else { "↑" };
    let state = if app.paused { "  PAUSED" } else { "" };
    f.render_widget(
        Paragraph::new(Line::from(vec![
            Span::styled(" vram top ", Style::new().fg(Color::Black).bg(Color::Cyan)),
            Span::raw(format!(
                "  {}  every {:?}  sort: {} {dir}  {}{state}",
                app.source,
                app.interval,
                app.sort.name(),
                if app.filter.is_empty() {
                    String::new()
                } else {
                    format!("filter: \"{}\"", app.filter)
                }
            )),
        ])),
        head,
    );
    let gpu_areas = Layout::vertical(vec![
        Constraint::Length(if full { 5 } else { 1 });
        n as usize
    ])
    .split(gpus);
    for (g, a) in sample.gpus.iter().zip(gpu_areas.iter()) {
        draw_gpu(f, app, g, *a, full);
    }
    match app.mode {
        Mode::List => draw_table(f, app, body),
        Mode::Process { gpu, pid } => draw_process(f, app, gpu, pid, body),
    }
    let footer = if app.editing {
        format!(" filter: {}▏  (Enter apply, Esc clear)", app.filter)
    } else {
        match app.mode {
            Mode::List => {
                " q quit  ↑↓ select  ⏎ process view  s sort  r reverse  / filter  p pause  ? help"
                    .into()
            }
            Mode::Process { .. } => " Esc back  q quit  p pause  ? help".into(),
        }
    };
    f.render_widget(
        Paragraph::new(footer).style(Style::new().fg(Color::Gray)),
        foot,
    );
    if app.help {
        draw_help(f, area);
    }
}

fn draw_gpu(f: &mut Frame, app: &App, g: &vram_monitor::GpuSample, a: Rect, full: bool) {
    let used = g.used_fraction();
    let mem_label = format!(
        "{} / {} ({})",
        human_bytes(g.memory_used_bytes),
        human_bytes(g.memory_total_bytes),
        pct(used)
    );
    let colour = if used > 0.9 {
        Color::Red
    } else if used > 0.75 {
        Color::Yellow
    } else {
        Color::Green
    };
    if !full {
        f.render_widget(
            LineGauge::default()
                .label(format!(
                    "GPU {} mem {mem_label} util {}",
                    g.index,
                    // NVML may not report utilisation (MIG, some drivers): unknown, not 0 %.
                    g.utilization_pct.map_or("n/a".into(), |u| format!("{u}%"))
                ))
                .filled_style(Style::new().fg(colour))
                .ratio(used.clamp(0.0, 1.0)),
            a,
        );
        return;
    }
    let block = Block::default().borders(Borders::ALL).title(format!(
        " GPU {} · {} · {} processes ",
        g.index,
        g.name,
        g.processes.len()
    ));
    let inner = block.inner(a);
    f.render_widget(block, a);
    let [left, mid, right] = Layout::horizontal([
        Constraint::Percentage(40),
        Constraint::Percentage(40),
        Constraint::Percentage(20),
    ])
    .areas(inner);
    let [m, u, _] = Layout::vertical([Constraint::Length(1); 3]).areas(left);
    f.render_widget(
        Gauge::default()
            .label(format!("mem {mem_label}"))
            .gauge_style(Style::new().fg(colour).bg(Color::DarkGray))
            .ratio(used.clamp(0.0, 1.0)),
        m,
    );
    let util = g.utilization_pct.unwrap_or(0);
    f.render_widget(
        Gauge::default()
            .label(
                g.utilization_pct
                    .map_or("util n/a".into(), |u| format!("util {u}%")),
            )
            .gauge_style(Style::new().fg(Color::Cyan).bg(Color::DarkGray))
            .ratio((f64::from(util) / 100.0).clamp(0.0, 1.0)),
        u,
    );
    let mem_hist = app.history.gpu_used(g.index);
    let w = mid.width as usize;
    f.render_widget(
        Sparkline::default()
            .block(Block::default().title("memory history"))
            .data(&mem_hist[mem_hist.len().saturating_sub(w)..])
            .max(g.memory_total_bytes.max(1))
            .style(Style::new().fg(colour)),
        mid,
    );
    // Unknown utilisation draws no history rather than a flat 0 %.
    let util_hist = if g.utilization_pct.is_some() {
        app.history.gpu_util(g.index)
    } else {
        Vec::new()
    };
    let w = right.width as usize;
    f.render_widget(
        Sparkline::default()
            .block(Block::default().title(if g.utilization_pct.is_some() {
                "util"
            } else {
                "util n/a"
            }))
            .data(&util_hist[util_hist.len().saturating_sub(w)..])
            .max(100)
            .style(Style::new().fg(Color::Cyan)),
        right,
    );
}

fn draw_table(f: &mut Frame, app: &App, area: Rect) {
    let rs = app.rows();
    let header = Row::new(["GPU", "PID", "USER", "GPU MEM", "SHARE", "TREND", "COMMAND"])
        .style(Style::new().add_modifier(Modifier::BOLD).fg(Color::Cyan));
    let rows_w: Vec<Row> = rs
        .iter()
        .map(|r| {
            let hist = app.history.process_bytes(r.gpu, r.pid);
            Row::new(vec![
                Cell::from(r.gpu.to_string()),
                Cell::from(r.pid.to_string()),
                Cell::from(r.user.clone()),
                Cell::from(r.bytes.map_or("n/a".into(), human_bytes)),
                Cell::from(pct(r.share)),
                Cell::from(trend(&hist, 16)),
                Cell::from(r.command.clone()),
            ])
        })
        .collect();
    let title = format!(" processes ({}) ", rs.len());
    let table = Table::new(
        rows_w,
        [
            Constraint::Length(3),
            Constraint::Length(8),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(6),
            Constraint::Length(16),
            Constraint::Min(10),
        ],
    )
    .header(header)
    .block(Block::default().borders(Borders::ALL).title(title))
    .row_highlight_style(Style::new().bg(Color::Blue).fg(Color::White))
    .highlight_symbol("▶ ");
    let mut st = TableState::default();
    if !rs.is_empty() {
        st.select(Some(app.selected.min(rs.len() - 1)));
    }
    f.render_stateful_widget(table, area, &mut st);
}

fn draw_process(f: &mut Frame, app: &App, gpu: u32, pid: u32, area: Rect) {
    let hist = app.history.process_bytes(gpu, pid);
    let t0 = app.history.samples().next().map_or(0, |s| s.t_ms);
    let pts: Vec<(f64, f64)> = app
        .history
        .samples()
        .zip(hist.iter())
        .filter_map(|(s, b)| b.map(|b| ((s.t_ms - t0) as f64 / 1000.0, b as f64)))
        .collect();
    let info = app.history.latest().and_then(|s| {
        s.gpus
            .iter()
            .find(|g| g.index == gpu)
            .and_then(|g| g.processes.iter().find(|p| p.pid == pid))
    });
    let (user, cmd) = info.map_or(("?".to_string(), "(exited)".to_string()), |p| {
        (p.user.clone(), p.command.clone())
    });
    let present: Vec<u64> = hist.iter().flatten().copied().collect();
    let (min, max) = (
        present.iter().min().copied().unwrap_or(0),
        present.iter().max().copied().unwrap_or(0),
    );
    let mut det = LeakDetector::new(LeakConfig::default());
    app.history.samples().for_each(|s| det.observe(s));
    let need = det.config().min_span_s;
    let verdict = det.assess_process(gpu, pid).map_or(
        format!("leak check: needs {need:.0} s of readings"),
        |f| {
            format!(
                "leak check: {} (floor {}{}/s, rose in {} of the last 4 stretches, Mann-Kendall p={:.1e})",
                if f.leaking {
                    "GROWING — possible leak"
                } else {
                    "no sustained growth"
                },
                if f.slope_bytes_per_s < 0.0 { "-" } else { "+" },
                human_bytes(f.slope_bytes_per_s.abs() as u64),
                f.rising_chunks,
                f.whole.p_increasing,
            )
        },
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(format!(" pid {pid} · {user} · GPU {gpu} "));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let [txt, chart] = Layout::vertical([Constraint::Length(3), Constraint::Min(3)]).areas(inner);
    let leak_style = if verdict.contains("GROWING") {
        Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
    } else {
        Style::new().fg(Color::Green)
    };
    f.render_widget(
        Paragraph::new(vec![
            Line::from(cmd),
            Line::from(format!(
                "now {}   min {}   max {}   samples {}",
                info.and_then(|p| p.gpu_memory_bytes)
                    .map_or("—".into(), human_bytes),
                human_bytes(min),
                human_bytes(max),
                present.len()
            )),
            Line::styled(verdict, leak_style),
        ]),
        txt,
    );
    let x_max = pts.last().map_or(1.0, |p| p.0.max(1.0));
    let y_max = (max as f64 * 1.1).max(1.0);
    let data = [Dataset::default()
        .name("GPU memory")
        .marker(Marker::Braille)
        .graph_type(GraphType::Line)
        .style(Style::new().fg(Color::Yellow))
        .data(&pts)];
    f.render_widget(
        Chart::new(data.to_vec())
            .x_axis(
                Axis::default()
                    .title("seconds")
                    .bounds([0.0, x_max])
                    .labels(["0".to_string(), format!("{x_max:.0}")]),
            )
            .y_axis(Axis::default().bounds([0.0, y_max]).labels([
                human_bytes(0),
                human_bytes((y_max / 2.0) as u64),
                human_bytes(y_max as u64),
            ])),
        chart,
    );
}

const HELP: &[(&str, &str)] = &[
    ("↑ ↓ / j k", "select a process"),
    ("g G", "first / last process"),
    ("Enter", "process view with memory history and leak check"),
    ("Esc", "back / clear filter / quit"),
    ("s", "cycle sort column (memory, pid, user, gpu, command)"),
    ("r", "reverse sort order"),
    (
        "/",
        "filter by pid, user or command (Enter apply, Esc clear)",
    ),
    ("p or space", "pause sampling"),
    ("?", "this help (any key closes)"),
    ("q, Ctrl-C", "quit"),
];

fn draw_help(f: &mut Frame, area: Rect) {
    let w = 78.min(area.width);
    let h = (HELP.len() as u16 + 4).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    let lines: Vec<Line> = HELP
        .iter()
        .map(|(k, d)| {
            Line::from(vec![
                Span::styled(
                    format!("{k:>12}  "),
                    Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD),
                ),
                Span::raw(*d),
            ])
        })
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" keys ")),
        r,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;
    use vram_monitor::SimulatedSource;

    fn app_with(samples: u64) -> App {
        let args = TopArgs {
            source: SourceArgs { demo: true },
            once: false,
            json: false,
            count: None,
            interval: Duration::from_secs(1),
            sort: SortArg::Memory,
            filter: String::new(),
        };
        let mut src = SimulatedSource::demo();
        let mut app = App::new(src.describe(), &args);
        for k in 0..samples {
            app.history.push(src.sample(k * 1000).unwrap());
        }
        app
    }

    fn screen(app: &App, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| draw(f, app)).unwrap();
        let buf = t.backend().buffer().clone();
        (0..h)
            .map(|y| {
                (0..w)
                    .map(|x| buf[(x, y)].symbol().to_string())
                    .collect::<String>()
                    + "\n"
            })
            .collect()
    }

    fn press(app: &mut App, code: KeyCode) -> bool {
        app.key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    /// Issue 25, item 11: a GPU whose utilisation NVML does not report showed "util 0%".
    #[test]
    fn unknown_utilisation_is_not_zero() {
        let mut app = app_with(0);
        let mut src = SimulatedSource::demo();
        for k in 0..30 {
            let mut s = src.sample(k * 1000).unwrap();
            for g in &mut s.gpus {
                g.utilization_pct = None;
            }
            app.history.push(s);
        }
        for (w, h) in [(140, 40), (100, 12)] {
            let s = screen(&app, w, h);
            assert!(!s.contains("util 0%"), "{s}");
            assert!(s.contains("util n/a"), "{s}");
        }
    }

    #[test]
    fn list_screen_shows_every_gpu_and_process() {
        let s = screen(&app_with(30), 140, 40);
        assert!(s.contains("GPU 0 · Simulated H100 80GB HBM3"), "{s}");
        assert!(s.contains("GPU 1 · Simulated A100-SXM4-40GB"), "{s}");
        for pid in ["4242", "5150", "6001"] {
            assert!(s.contains(pid), "pid {pid} missing:\n{s}");
        }
        assert!(
            s.contains("processes (4)") || s.contains("processes (3)"),
            "{s}"
        );
    }

    #[test]
    fn filter_sort_and_process_view_follow_keys() {
        let mut app = app_with(120);
        // Default: memory, largest first → the 38+ GiB trainer on top.
        assert_eq!(app.rows()[0].pid, 4242);
        press(&mut app, KeyCode::Char('s')); // pid ascending
        assert_eq!(app.sort, SortKey::Pid);
        let pids: Vec<u32> = app.rows().iter().map(|r| r.pid).collect();
        assert!(pids.windows(2).all(|w| w[0] < w[1]), "{pids:?}");
        press(&mut app, KeyCode::Char('/'));
        for c in "carol".chars() {
            press(&mut app, KeyCode::Char(c));
        }
        press(&mut app, KeyCode::Enter);
        let rows = app.rows();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].pid, 6001);
        press(&mut app, KeyCode::Enter);
        assert_eq!(app.mode, Mode::Process { gpu: 1, pid: 6001 });
        let s = screen(&app, 140, 40);
        assert!(s.contains("pid 6001 · carol · GPU 1"), "{s}");
        assert!(
            s.contains("GROWING"),
            "the leaking notebook must be flagged:\n{s}"
        );
        assert!(!press(&mut app, KeyCode::Esc));
        assert_eq!(app.mode, Mode::List);
        press(&mut app, KeyCode::Char('?'));
        assert!(screen(&app, 140, 40).contains("reverse sort order"));
        assert!(!press(&mut app, KeyCode::Char('x')), "any key closes help");
        assert!(press(&mut app, KeyCode::Char('q')));
    }

    #[test]
    fn training_job_is_not_flagged_in_process_view() {
        let mut app = app_with(120);
        press(&mut app, KeyCode::Enter); // top row: pid 4242
        assert_eq!(app.mode, Mode::Process { gpu: 0, pid: 4242 });
        let s = screen(&app, 140, 40);
        assert!(s.contains("no sustained growth"), "{s}");
    }

    #[test]
    fn small_terminal_falls_back_to_one_line_per_gpu() {
        let s = screen(&app_with(5), 100, 12);
        assert!(s.contains("GPU 0 mem"), "{s}");
        assert!(s.contains("GPU 1 mem"), "{s}");
    }

    #[test]
    fn tiny_terminals_do_not_panic() {
        let mut app = app_with(20);
        for (w, h) in [(1, 1), (20, 5), (40, 8), (200, 3)] {
            app.help = false;
            assert!(!screen(&app, w, h).is_empty());
            app.help = true;
            assert!(!screen(&app, w, h).is_empty());
        }
    }

    #[test]
    fn trend_scales_to_its_own_maximum() {
        assert_eq!(trend(&[Some(0), Some(50), None, Some(100)], 8), "▁▅ █");
        assert_eq!(trend(&[Some(100), Some(150), Some(200)], 2), "▁█");
        assert_eq!(trend(&[Some(1000), Some(1001), Some(1000)], 8), "▄▄▄");
    }
}
