//! Two small SVG line charts for the report: no plotting crate here, since
//! the ones that draw text need system fonts this machine kind lacks.

/// One series: (x, y) points.
pub struct Series<'a> {
    /// Legend.
    pub name: &'a str,
    /// Points.
    pub points: &'a [(f64, f64)],
    /// Stroke colour.
    pub color: &'a str,
}

/// A line chart with axes, ticks and a legend.
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    log_x: bool,
) -> String {
    let (w, h, left, right, top, bottom) = (800.0, 420.0, 70.0, 20.0, 40.0, 50.0);
    let fx = |x: f64| if log_x { x.max(1e-9).log10() } else { x };
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|&(x, y)| (fx(x), y)))
        .collect();
    let (min_x, max_x) = all
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &(x, _)| (a.min(x), b.max(x)));
    let max_y = all.iter().fold(0.0_f64, |m, &(_, y)| m.max(y)) * 1.05;
    let span_x = (max_x - min_x).max(1e-9);
    let px = |x: f64| left + (fx(x) - min_x) / span_x * (w - left - right);
    let py = |y: f64| h - bottom - y / max_y.max(1e-9) * (h - top - bottom);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{title}</text>\n\
         <line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n\
         <line x1=\"{left}\" y1=\"{top}\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{x_label}</text>\n\
         <text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">{y_label}</text>\n",
        w / 2.0,
        h - bottom,
        w - right,
        h - bottom,
        h - bottom,
        (w + left) / 2.0,
        h - 12.0,
        h / 2.0,
        h / 2.0,
    );
    for i in 0..=5 {
        let y = max_y * f64::from(i) / 5.0;
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text><line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#eee\"/>\n",
            left - 6.0,
            py(y) + 4.0,
            tick(y),
            py(y),
            w - right,
            py(y)
        );
        let x = min_x + span_x * f64::from(i) / 5.0;
        let label = if log_x { 10f64.powf(x) } else { x };
        let xp = left + (x - min_x) / span_x * (w - left - right);
        svg += &format!(
            "<text x=\"{xp}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
            h - bottom + 16.0,
            tick(label)
        );
    }
    for (i, s) in series.iter().enumerate() {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        svg += &format!(
            "<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"2\" points=\"{}\"/>\n",
            s.color,
            points.join(" ")
        );
        let ly = top + 16.0 * i as f64;
        svg += &format!(
            "<line x1=\"{}\" y1=\"{ly}\" x2=\"{}\" y2=\"{ly}\" stroke=\"{}\" stroke-width=\"3\"/><text x=\"{}\" y=\"{}\">{}</text>\n",
            w - right - 200.0,
            w - right - 180.0,
            s.color,
            w - right - 175.0,
            ly + 4.0,
            s.name
        );
    }
    svg + "</svg>\n"
}

fn tick(v: f64) -> String {
    if v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}
