//! The sweep's figure: decisions per second against concurrent callers, one line per series,
//! written as SVG (plotters' SVG backend; no fonts are read, the viewer draws the text).

use plotters::prelude::*;
use std::path::Path;

/// One line of the figure: its legend, and (callers, decisions per second) in callers order.
#[derive(Clone, Debug)]
pub struct Series {
    pub name: String,
    pub points: Vec<(u32, f64)>,
}

/// Writes `series` to `path`: callers on a log2 axis, decisions per second on a log axis (the
/// in-memory and Redis figures are two orders of magnitude apart). `note` goes under the title.
pub fn write_svg(path: &Path, note: &str, series: &[Series]) -> Result<(), Box<dyn std::error::Error>> {
    let points = || series.iter().flat_map(|s| s.points.iter().copied()).filter(|&(c, v)| c > 0 && v > 0.0);
    let max_callers = points().map(|(c, _)| c).max().ok_or("no points to plot")?;
    let (low, high) = points().fold((f64::INFINITY, 0f64), |(lo, hi), (_, v)| (lo.min(v), hi.max(v)));
    // Whole decades around the data, so the axis labels fall on 10^k.
    let (low, high) = (10f64.powf(low.log10().floor()), 10f64.powf(high.log10().ceil()));
    let x_max = f64::from(max_callers).log2().ceil();

    let root = SVGBackend::new(path, (960, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(56);
    top.draw_text(
        "Decisions per second against concurrent callers",
        &("sans-serif", 20).into_font().color(&BLACK),
        (20, 8),
    )?;
    top.draw_text(note, &("sans-serif", 13).into_font().color(&BLACK.mix(0.7)), (20, 34))?;
    let mut chart = ChartBuilder::on(&body)
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(-0.25..x_max + 0.25, (low..high).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("concurrent callers")
        .y_desc("decisions per second")
        .x_labels(x_max as usize + 1)
        .x_label_formatter(&|x| format!("{}", 2f64.powf(x.round()) as u64))
        .y_label_formatter(&|y| per_second(*y))
        .max_light_lines(3)
        .light_line_style(BLACK.mix(0.06))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()].to_rgba();
        let xy: Vec<(f64, f64)> = s.points.iter().map(|&(c, v)| (f64::from(c).log2(), v)).collect();
        chart
            .draw_series(LineSeries::new(xy.iter().copied(), color.stroke_width(2)))?
            .label(s.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], color.stroke_width(2)));
        chart.draw_series(xy.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    root.present()?;
    Ok(())
}

/// Dark enough to read on white, far enough apart to tell apart.
const COLORS: [RGBColor; 8] = [
    RGBColor(213, 38, 63),
    RGBColor(46, 125, 50),
    RGBColor(230, 120, 0),
    RGBColor(21, 101, 192),
    RGBColor(123, 31, 162),
    RGBColor(0, 131, 143),
    RGBColor(93, 64, 55),
    RGBColor(96, 96, 96),
];

/// 12 345 678 → "12M", 45 000 → "45k".
fn per_second(y: f64) -> String {
    if y >= 1e6 {
        format!("{:.0}M", y / 1e6)
    } else if y >= 1e3 {
        format!("{:.0}k", y / 1e3)
    } else {
        format!("{y:.0}")
    }
}
