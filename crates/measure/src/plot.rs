//! Plots of measured distributions: empirical CDFs and box plots, each
//! written both as SVG and as PNG.
//!
//! Drawing uses `plotters`; text is set in DejaVu Sans, embedded in the
//! binary (the `dejavu` crate) and registered with plotters' `ab_glyph`
//! renderer, so no system font library is needed and PNGs carry the same
//! labels as SVGs.
//!
//! Each series gets its own colour (a ten-colour palette, repeating after
//! ten series). Series with no finite value are skipped; a plot with no
//! series left is an error, never a panic. Values that are not finite
//! (NaN, ±inf) are ignored.

use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::FontStyle;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::stats;

/// The font family name plot text uses (registered on first use).
const FONT: &str = "sans-serif";

/// Series colours (the "Tableau 10" palette).
const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// Above this many values a CDF is drawn through this many evenly spaced
/// order statistics instead of one step per value (keeps files small).
const MAX_CDF_POINTS: usize = 4000;

/// Size of a CDF plot, pixels.
const CDF_SIZE: (u32, u32) = (1000, 600);

/// Height of a box plot, pixels (its width grows with the series).
const BOX_HEIGHT: u32 = 600;

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// Registers the embedded font with plotters, once per process.
fn ensure_font() -> Result<(), String> {
    static REGISTERED: OnceLock<Result<(), String>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular())
                .map_err(|_| "cannot load the embedded DejaVu Sans font".to_string())?;
            plotters::style::register_font(FONT, FontStyle::Bold, dejavu::sans::bold())
                .map_err(|_| "cannot load the embedded DejaVu Sans Bold font".to_string())
        })
        .clone()
}

/// Formats an axis tick value compactly (no float noise like
/// `0.30000000000000004`).
fn tick(v: &f64) -> String {
    let a = v.abs();
    let s = if a == 0.0 {
        return "0".to_string();
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.2e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') && !s.contains('e') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// `lo..hi` widened a little on both sides (and made non-empty).
fn padded(lo: f64, hi: f64, share: f64) -> (f64, f64) {
    if hi > lo {
        let pad = (hi - lo) * share;
        (lo - pad, hi + pad)
    } else {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo - pad, hi + pad)
    }
}

/// A picture that can be drawn on any plotters backend.
trait Picture {
    /// Draws the picture on `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Draws `pic` as SVG into `svg_path` and as PNG into `png_path`.
fn render_both<P: Picture>(
    pic: &P,
    svg_path: &Path,
    png_path: &Path,
    size: (u32, u32),
) -> Result<(), String> {
    ensure_font()?;
    {
        let root = SVGBackend::new(svg_path, size).into_drawing_area();
        pic.draw(&root)?;
        root.present()
            .map_err(|e| format!("writing {}: {e}", svg_path.display()))?;
    }
    {
        let root = BitMapBackend::new(png_path, size).into_drawing_area();
        pic.draw(&root)?;
        root.present()
            .map_err(|e| format!("writing {}: {e}", png_path.display()))?;
    }
    Ok(())
}

/// Converts a plotters drawing error into a message.
fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |e| format!("drawing {what}: {e}")
}

/// The points of an empirical CDF as a step line starting at share 0.
fn cdf_path(values: &[f64]) -> Vec<(f64, f64)> {
    let e = stats::ecdf(values);
    let n = e.len();
    let Some(&(first, _)) = e.first() else {
        return Vec::new();
    };
    if n > MAX_CDF_POINTS {
        let mut path = vec![(first, 0.0)];
        path.extend((0..MAX_CDF_POINTS).map(|k| {
            let i = (k * (n - 1)) / (MAX_CDF_POINTS - 1);
            e[i]
        }));
        return path;
    }
    let mut path = Vec::with_capacity(2 * n + 1);
    let mut prev = 0.0;
    for (x, f) in e {
        path.push((x, prev));
        path.push((x, f));
        prev = f;
    }
    path
}

/// Draws the empirical CDFs of `series` (name, values), one line per
/// series, on a common x axis (labelled `x_label`), share 0..1 on the y
/// axis, with a legend naming the series. Writes the picture to
/// `svg_path` (SVG) and `png_path` (PNG).
///
/// Series without a finite value are skipped; an error is returned when
/// none is left, or when a file cannot be written.
pub fn cdf_plot(
    title: &str,
    x_label: &str,
    series: &[(String, Vec<f64>)],
    svg_path: &Path,
    png_path: &Path,
) -> Result<(), String> {
    let curves: Vec<Curve<'_>> = series
        .iter()
        .enumerate()
        .map(|(i, (name, values))| (i, name.as_str(), cdf_path(values)))
        .filter(|(_, _, path)| !path.is_empty())
        .collect();
    let (lo, hi) = curves
        .iter()
        .flat_map(|(_, _, path)| path.iter().map(|p| p.0))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
    if curves.is_empty() || !lo.is_finite() || !hi.is_finite() {
        return Err(format!("{title}: no data to plot"));
    }
    let pic = CdfPicture {
        title,
        x_label,
        curves,
        x_range: padded(lo, hi, 0.02),
    };
    render_both(&pic, svg_path, png_path, CDF_SIZE)
}

/// One CDF line: (palette index, series name, step path).
type Curve<'a> = (usize, &'a str, Vec<(f64, f64)>);

/// A CDF plot ready to draw.
struct CdfPicture<'a> {
    title: &'a str,
    x_label: &'a str,
    curves: Vec<Curve<'a>>,
    x_range: (f64, f64),
}

impl Picture for CdfPicture<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        let (x0, x1) = self.x_range;
        root.fill(&WHITE).map_err(err("background"))?;
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, (FONT, 22))
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d(x0..x1, 0.0..1.0)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .x_desc(self.x_label)
            .y_desc("share ≤ x")
            .x_label_formatter(&tick)
            .y_label_formatter(&tick)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err("axes"))?;
        for (i, name, path) in &self.curves {
            let c = colour(*i);
            chart
                .draw_series(LineSeries::new(path.iter().copied(), c.stroke_width(2)))
                .map_err(err("series"))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(3))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err("legend"))?;
        Ok(())
    }
}

/// One box of a box plot (all type 7 percentiles, see [`crate::stats`]).
struct BoxStats {
    min: f64,
    p5: f64,
    p25: f64,
    median: f64,
    p75: f64,
    p95: f64,
    max: f64,
}

impl BoxStats {
    fn of(values: &[f64]) -> Option<Self> {
        let q = |p| stats::quantile(values, p);
        Some(Self {
            min: q(0.0)?,
            p5: q(0.05)?,
            p25: q(0.25)?,
            median: q(0.5)?,
            p75: q(0.75)?,
            p95: q(0.95)?,
            max: q(1.0)?,
        })
    }
}

/// Draws one box per series (name, values), side by side, the value axis
/// vertical (labelled `y_label`), each series' name written under its box
/// in the series' colour. Writes the picture to `svg_path` (SVG) and
/// `png_path` (PNG).
///
/// A box spans the 25th to the 75th percentile with a line at the median;
/// its whiskers reach the 5th and the 95th percentile; small circles mark
/// the minimum and the maximum.
///
/// Series without a finite value are skipped; an error is returned when
/// none is left, or when a file cannot be written.
pub fn box_plot(
    title: &str,
    y_label: &str,
    series: &[(String, Vec<f64>)],
    svg_path: &Path,
    png_path: &Path,
) -> Result<(), String> {
    let boxes: Vec<(usize, &str, BoxStats)> = series
        .iter()
        .enumerate()
        .filter_map(|(i, (name, values))| Some((i, name.as_str(), BoxStats::of(values)?)))
        .collect();
    if boxes.is_empty() {
        return Err(format!("{title}: no data to plot"));
    }
    let lo = boxes.iter().map(|b| b.2.min).fold(f64::INFINITY, f64::min);
    let hi = boxes
        .iter()
        .map(|b| b.2.max)
        .fold(f64::NEG_INFINITY, f64::max);
    let (y0, y1) = padded(lo, hi, 0.05);

    // Wide enough for every name under its box (about 8 px a character).
    let longest = boxes.iter().map(|b| b.1.chars().count()).max().unwrap_or(0);
    let slot = (longest as u32 * 8 + 20).max(100);
    let width = (boxes.len() as u32)
        .saturating_mul(slot)
        .saturating_add(120)
        .clamp(600, 8000);

    let pic = BoxPicture {
        title,
        y_label,
        boxes,
        y_range: (y0, y1),
    };
    render_both(&pic, svg_path, png_path, (width, BOX_HEIGHT))
}

/// A box plot ready to draw.
struct BoxPicture<'a> {
    title: &'a str,
    y_label: &'a str,
    /// (palette index, name, statistics)
    boxes: Vec<(usize, &'a str, BoxStats)>,
    y_range: (f64, f64),
}

impl Picture for BoxPicture<'_> {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(err("background"))?;
        let n = self.boxes.len() as f64;
        let (y0, y1) = self.y_range;
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, (FONT, 22))
            .margin(15)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5..(n - 0.5), y0..y1)
            .map_err(err("chart"))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(self.y_label)
            .y_label_formatter(&tick)
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err("axes"))?;
        let half = 0.3;
        for (k, (i, name, b)) in self.boxes.iter().enumerate() {
            let x = k as f64;
            let c = colour(*i);
            let line = c.stroke_width(2);
            chart
                .draw_series([
                    Rectangle::new([(x - half, b.p25), (x + half, b.p75)], c.mix(0.25).filled()),
                    Rectangle::new([(x - half, b.p25), (x + half, b.p75)], line),
                ])
                .map_err(err("box"))?;
            chart
                .draw_series([
                    PathElement::new(
                        vec![(x - half, b.median), (x + half, b.median)],
                        c.stroke_width(3),
                    ),
                    PathElement::new(vec![(x, b.p75), (x, b.p95)], line),
                    PathElement::new(vec![(x, b.p25), (x, b.p5)], line),
                    PathElement::new(vec![(x - half / 2.0, b.p95), (x + half / 2.0, b.p95)], line),
                    PathElement::new(vec![(x - half / 2.0, b.p5), (x + half / 2.0, b.p5)], line),
                ])
                .map_err(err("whiskers"))?;
            chart
                .draw_series([
                    Circle::new((x, b.min), 3, c.stroke_width(1)),
                    Circle::new((x, b.max), 3, c.stroke_width(1)),
                ])
                .map_err(err("extremes"))?;
            // The name, centred under the box, below the x axis.
            let (px, py) = chart.backend_coord(&(x, y0));
            let style = TextStyle::from((FONT, 14).into_font())
                .color(&c)
                .pos(Pos::new(HPos::Center, VPos::Top));
            root.draw(&Text::new(name.to_string(), (px, py + 10), style))
                .map_err(err("series name"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    const PNG_MAGIC: &[u8] = b"\x89PNG\r\n\x1a\n";

    fn series() -> Vec<(String, Vec<f64>)> {
        vec![
            (
                "onionmix-basic/omclient0".to_string(),
                (1..=200).map(|i| f64::from(i) * 1.5).collect(),
            ),
            ("tor-basic/torclient0".to_string(), vec![]),
            (
                "tor-basic/client & <1>".to_string(),
                (1..=50).map(|i| 100.0 + f64::from(i * i) / 10.0).collect(),
            ),
        ]
    }

    fn check(svg: &Path, png: &Path, names: &[&str]) {
        let text = std::fs::read_to_string(svg).unwrap();
        assert!(
            text.starts_with("<svg") || text.starts_with("<?xml"),
            "{}",
            &text[..40]
        );
        for name in names {
            assert!(text.contains(name), "{name} missing from the SVG");
        }
        let bytes = std::fs::read(png).unwrap();
        assert!(bytes.starts_with(PNG_MAGIC));
        assert!(bytes.len() > 1000);
    }

    #[test]
    fn cdf_plot_writes_files() {
        let dir = tempfile::tempdir().unwrap();
        let (svg, png) = (dir.path().join("a.svg"), dir.path().join("a.png"));
        cdf_plot("bulk: ttlb_ms", "ttlb_ms", &series(), &svg, &png).unwrap();
        check(
            &svg,
            &png,
            &[
                "onionmix-basic/omclient0",
                "tor-basic/client &amp; &lt;1&gt;",
                "ttlb_ms",
            ],
        );
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(!text.contains("tor-basic/torclient0"), "empty series drawn");
    }

    #[test]
    fn box_plot_writes_files() {
        let dir = tempfile::tempdir().unwrap();
        let (svg, png) = (dir.path().join("b.svg"), dir.path().join("b.png"));
        box_plot("bulk: ttlb_ms", "ttlb_ms", &series(), &svg, &png).unwrap();
        check(
            &svg,
            &png,
            &[
                "onionmix-basic/omclient0",
                "tor-basic/client &amp; &lt;1&gt;",
            ],
        );
    }

    #[test]
    fn single_value_and_large_series() {
        let dir = tempfile::tempdir().unwrap();
        let one = vec![("one".to_string(), vec![5.0])];
        let (svg, png) = (dir.path().join("c.svg"), dir.path().join("c.png"));
        cdf_plot("t", "x", &one, &svg, &png).unwrap();
        box_plot("t", "x", &one, &svg, &png).unwrap();
        check(&svg, &png, &["one"]);
        let big = vec![(
            "big".to_string(),
            (0..20_000).map(|i| f64::from(i % 977)).collect(),
        )];
        cdf_plot("t", "x", &big, &svg, &png).unwrap();
        check(&svg, &png, &["big"]);
    }

    #[test]
    fn all_empty_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let (svg, png) = (dir.path().join("d.svg"), dir.path().join("d.png"));
        let empty = vec![("a".to_string(), vec![]), ("b".to_string(), vec![f64::NAN])];
        assert!(cdf_plot("t", "x", &empty, &svg, &png).is_err());
        assert!(box_plot("t", "x", &empty, &svg, &png).is_err());
        assert!(cdf_plot("t", "x", &[], &svg, &png).is_err());
        assert!(box_plot("t", "x", &[], &svg, &png).is_err());
    }

    #[test]
    fn unwritable_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("no/such/dir");
        let r = cdf_plot(
            "t",
            "x",
            &series(),
            &missing.join("e.svg"),
            &missing.join("e.png"),
        );
        assert!(r.is_err());
    }

    #[test]
    fn ticks_are_compact() {
        assert_eq!(tick(&0.0), "0");
        assert_eq!(tick(&0.30000000000000004), "0.3");
        assert_eq!(tick(&2.5), "2.5");
        assert_eq!(tick(&150.0), "150");
        assert_eq!(tick(&12.34), "12.3");
    }
}
