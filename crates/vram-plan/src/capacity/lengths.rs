//! `--max-model-len` / `--context-length` as the engine's own argument parser reads them.
//!
//! vLLM reads `--max-model-len` through `human_readable_int` (vllm/engine/arg_utils.py; from
//! 0.20 vllm/utils/argparse_utils.py), read in the released wheels:
//! - 0.8.4 to 0.12.x: a number followed by `k`, `m`, `g` (×10³, ×10⁶, ×10⁹; a decimal number
//!   allowed, the product truncated: `int(float(number) * mult)`) or `K`, `M`, `G` (×2¹⁰, ×2²⁰,
//!   ×2³⁰; a whole number only), else Python's `int()`. Its pattern also takes `t`/`T`, which
//!   have no multiplier there and fall through to `int()`, which refuses them.
//! - 0.13.0 on: `t` (×10¹²) and `T` (×2⁴⁰) too.
//! - 0.14.0 on: `human_readable_int_or_auto`, which also takes `-1` or `auto` (any case) for
//!   "fit the length to the memory left" (vllm/config/model.py `_get_and_verify_max_len`, then
//!   the engine's auto-fit), which vram does not model: refused, saying so.
//! - Before 0.8.4 (0.8.0 to 0.8.3 read in their wheels): plain `type=int`. The function is
//!   the same in the 0.8.4, 0.8.5, 0.9.0, 0.10.0, 0.10.2, 0.11.0 and 0.12.0 wheels (0.10's in
//!   `engine/arg_utils.py`, which gives `max_model_len` and `max_num_batched_tokens` this type),
//!   and 0.13.0 to 0.20.0's likewise, as are 0.21.0's and 0.22.1's (`utils/argparse_utils.py`:
//!   `human_readable_int` with `t`/`T`, and `max_model_len` typed `human_readable_int_or_auto`);
//!   the sdists of 0.10.1.1, 0.20.2 and 0.23.0 read the same.
//!
//! SGLang reads `--context-length` with `type=int` (python/sglang/srt/server_args.py at
//! v0.5.3), a plain integer.
//!
//! Python's `int()` takes surrounding whitespace, a sign and single underscores between digits
//! (`32_768`); those are read the same way here. Unicode digits other than ASCII, which Python
//! also takes, are refused.

use super::Engine;

/// vLLM 0.8.4, the first release whose `--max-model-len` takes suffixes.
const VLLM_SUFFIXES: [u32; 3] = [0, 8, 4];
/// vLLM 0.13.0, the first release whose suffixes include `t`/`T`.
const VLLM_TERA: [u32; 3] = [0, 13, 0];
/// vLLM 0.14.0, the first release taking `-1`/`auto`.
const VLLM_AUTO: [u32; 3] = [0, 14, 0];

/// The longest request `text` asks of `engine` at `version` (its numbers), read as that
/// version's parser reads it; `Err` is the one-line reason, naming what that version takes.
pub fn parse_max_model_len(engine: Engine, version: [u32; 3], text: &str) -> Result<u64, String> {
    let shown = format!("{}.{}.{}", version[0], version[1], version[2]);
    let value = text.trim();
    let flag = engine.len_flag();
    let takes = match engine {
        Engine::Sglang => format!("SGLang {shown} reads {flag} as a plain integer"),
        Engine::Vllm if version < VLLM_SUFFIXES => {
            format!("vLLM {shown} reads {flag} as a plain integer (suffixes from vLLM 0.8.4)")
        }
        Engine::Vllm => {
            let (dec, bin) = if version < VLLM_TERA {
                ("k, m, g", "K, M, G")
            } else {
                ("k, m, g, t", "K, M, G, T")
            };
            format!(
                "vLLM {shown} reads {flag} as an integer, or a number followed by {dec} \
                 (powers of 1000, decimals allowed) or {bin} (powers of 1024, whole numbers only)"
            )
        }
    };
    let refuse = |why: &str| Err(format!("{flag} {text:?}: {why}{takes}"));
    if engine == Engine::Vllm
        && version >= VLLM_AUTO
        && (value == "-1" || value.eq_ignore_ascii_case("auto"))
    {
        return Err(format!(
            "{flag} {text:?}: vLLM {shown} takes -1 or auto to fit the length to the memory \
             left, which vram does not model; give a length"
        ));
    }
    let suffixed = engine == Engine::Vllm && version >= VLLM_SUFFIXES;
    if suffixed {
        if let Some(last) = value.chars().last().filter(|c| "kKmMgGtT".contains(*c)) {
            let number = &value[..value.len() - 1];
            let decimal = match last {
                'k' => Some(1e3),
                'm' => Some(1e6),
                'g' => Some(1e9),
                't' if version >= VLLM_TERA => Some(1e12),
                _ => None,
            };
            let binary = match last {
                'K' => Some(10),
                'M' => Some(20),
                'G' => Some(30),
                'T' if version >= VLLM_TERA => Some(40),
                _ => None,
            };
            let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
            let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
            let pattern = digits(whole) && (frac.is_empty() || digits(frac));
            let pattern = pattern && !number.ends_with('.');
            if pattern {
                if let Some(mult) = decimal {
                    // `int(float(number) * mult)`: the same rounding, then truncation.
                    let v: f64 = number.parse().unwrap_or(f64::INFINITY) * mult;
                    return positive(v.is_finite().then_some(v.trunc()).and_then(to_u64))
                        .map_or_else(refuse, Ok);
                }
                if let Some(shift) = binary {
                    if !frac.is_empty() {
                        return refuse(&format!(
                            "decimals are not allowed with {last} (vLLM suggests {number}{}); ",
                            last.to_ascii_lowercase()
                        ));
                    }
                    let v = whole
                        .parse::<u64>()
                        .ok()
                        .and_then(|n| n.checked_mul(1u64 << shift));
                    return positive(v).map_or_else(refuse, Ok);
                }
            }
        }
    }
    match python_int(value) {
        Some(n) if n <= 0 => refuse("a length is a positive number; "),
        Some(n) => u64::try_from(n)
            .map_err(|_| ())
            .map_or_else(|()| refuse("too large; "), Ok),
        None => refuse(""),
    }
}

/// A truncated product back to an integer, when it is one `u64` holds.
fn to_u64(v: f64) -> Option<u64> {
    (v >= 0.0 && v < u64::MAX as f64).then_some(v as u64)
}

/// A length that is at least 1.
fn positive(v: Option<u64>) -> Result<u64, &'static str> {
    match v {
        Some(0) => Err("a length is a positive number; "),
        Some(n) => Ok(n),
        None => Err("too large; "),
    }
}

/// Python's `int(text)` for ASCII text already stripped: an optional sign, then digits with
/// single underscores between them. `None` when Python refuses it or the value passes `i128`.
fn python_int(text: &str) -> Option<i128> {
    let (neg, digits) = match text.as_bytes().first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    let ok = !digits.is_empty()
        && !digits.starts_with('_')
        && !digits.ends_with('_')
        && !digits.contains("__")
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'_');
    if !ok {
        return None;
    }
    let n: i128 = digits.replace('_', "").parse().ok()?;
    Some(if neg { -n } else { n })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: Engine = Engine::Vllm;

    #[test]
    fn vllm_suffixes_by_version() {
        let at = |v: [u32; 3], s: &str| parse_max_model_len(V, v, s);
        // 0.8.4 to 0.12: k/m/g decimal, K/M/G binary; `t`/`T` refused.
        assert_eq!(at([0, 11, 0], "32k"), Ok(32_000));
        assert_eq!(at([0, 11, 0], "32K"), Ok(32_768));
        assert_eq!(at([0, 8, 4], "25.6k"), Ok(25_600));
        assert_eq!(at([0, 12, 0], "1M"), Ok(1 << 20));
        assert_eq!(at([0, 11, 0], " 1g "), Ok(1_000_000_000));
        // float(1.001) * 1000 is 1000.9999999999999 in IEEE doubles; vLLM's int() gives 1000.
        assert_eq!(at([0, 11, 0], "1.001k"), Ok(1000));
        let e = at([0, 12, 0], "1t").unwrap_err();
        assert!(e.starts_with("--max-model-len \"1t\": vLLM 0.12.0 reads --max-model-len as an integer, or a number followed by k, m, g (powers"), "{e}");
        assert!(at([0, 12, 0], "1T").is_err());
        // 0.13.0: t and T.
        assert_eq!(at([0, 13, 0], "1t"), Ok(1_000_000_000_000));
        assert_eq!(at([0, 13, 0], "1T"), Ok(1 << 40));
        let e = at([0, 13, 0], "1.5K").unwrap_err();
        assert!(
            e.contains("decimals are not allowed with K (vLLM suggests 1.5k)"),
            "{e}"
        );
        assert!(e.contains("k, m, g, t"), "{e}");
        // Before 0.8.4: plain integers only.
        let e = at([0, 8, 3], "32k").unwrap_err();
        assert!(
            e.contains(
                "vLLM 0.8.3 reads --max-model-len as a plain integer (suffixes from vLLM 0.8.4)"
            ),
            "{e}"
        );
        assert_eq!(at([0, 8, 3], "32768"), Ok(32_768));
        assert_eq!(at([0, 8, 4], "32k"), Ok(32_000));
        // 0.10.0 and 0.10.2 (read in their wheels): the 0.8.4 rule, no t/T, no auto.
        for v in [[0, 10, 0], [0, 10, 2]] {
            assert_eq!(at(v, "25.6k"), Ok(25_600));
            assert_eq!(at(v, "32K"), Ok(32_768));
            assert!(at(v, "1t").is_err());
            assert!(at(v, "auto").unwrap_err().contains("k, m, g (powers"));
        }
        // 0.21.0 and 0.22.1 (read in their wheels): t/T, and -1/auto for the auto-fit.
        for v in [[0, 21, 0], [0, 22, 1]] {
            assert_eq!(at(v, "1T"), Ok(1 << 40));
            assert_eq!(at(v, "2t"), Ok(2_000_000_000_000));
            assert!(at(v, "auto").unwrap_err().contains("to fit the length"));
            assert!(at(v, "-1").unwrap_err().contains("to fit the length"));
        }
    }

    #[test]
    fn python_int_forms_and_refusals() {
        let at = |s: &str| parse_max_model_len(V, [0, 11, 0], s);
        assert_eq!(at("32_768"), Ok(32_768));
        assert_eq!(at("+4096"), Ok(4096));
        assert_eq!(at("007"), Ok(7));
        for bad in [
            "", "k", "32kk", "3__2", "_32", "32_", "1e3", "32 k", "0x10", ".5k", "5.k", "３２",
        ] {
            assert!(at(bad).is_err(), "{bad}");
        }
        assert!(at("0")
            .unwrap_err()
            .contains("a length is a positive number"));
        assert!(at("0k")
            .unwrap_err()
            .contains("a length is a positive number"));
        assert!(at("-5")
            .unwrap_err()
            .contains("a length is a positive number"));
        assert!(at("99999999999999999999")
            .unwrap_err()
            .contains("too large"));
        assert!(at("99999999999g").unwrap_err().contains("too large"));
        assert!(at("99999999999999G").unwrap_err().contains("too large"));
        // -1/auto: before 0.14 a negative length; from 0.14 vLLM's auto-fit, not modelled.
        assert!(at("-1")
            .unwrap_err()
            .contains("a length is a positive number"));
        let e = parse_max_model_len(V, [0, 14, 0], "AUTO").unwrap_err();
        assert!(
            e.contains("vLLM 0.14.0 takes -1 or auto to fit the length"),
            "{e}"
        );
        assert!(parse_max_model_len(V, [0, 20, 0], "-1").is_err());
    }

    #[test]
    fn sglang_reads_a_plain_integer() {
        let s = |t: &str| parse_max_model_len(Engine::Sglang, [0, 5, 0], t);
        assert_eq!(s("32768"), Ok(32_768));
        let e = s("32k").unwrap_err();
        assert_eq!(
            e,
            "--context-length \"32k\": SGLang 0.5.0 reads --context-length as a plain integer"
        );
    }
}
