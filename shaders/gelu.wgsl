// gelu: y = x · Φ(x) = x · (1 + erf(x / √2)) / 2, BERT's exact GELU (body: unary.wgsl, s unused).
// erf by Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), the CPU's formula
// (cpu::ops::gelu).

fn op(x: f32, s: f32) -> f32 {
    let z = abs(x) * 0.70710678118654752;
    let t = 1.0 / (1.0 + 0.3275911 * z);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let e = 1.0 - poly * exp(-z * z);
    return 0.5 * x * (1.0 + select(e, -e, x < 0.0));
}
