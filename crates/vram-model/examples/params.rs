//! Prints the exact parameter count of each `config.json` given, per component, as JSON lines.
//!
//! `cargo run -p vram-model --example params -- path/to/config.json ...`

use vram_model::arch::Model;
use vram_model::blocks::Component;

fn main() {
    for path in std::env::args().skip(1) {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        match vram_model::hf::parse_config(&text, &path) {
            Ok(Model::Transformer(t)) => {
                let p = t.params_by_component();
                let comps: Vec<String> = Component::ALL
                    .iter()
                    .filter(|c| p.get(**c) > 0)
                    .map(|c| format!("\"{}\": {}", c.key(), p.get(*c)))
                    .collect();
                println!(
                    "{path} {{\"params\": {}, \"components\": {{{}}}}}",
                    t.param_count(),
                    comps.join(", ")
                );
            }
            Ok(m) => println!("{path} {{\"params\": {}}}", m.param_count()),
            Err(e) => println!("{path} error: {e}"),
        }
    }
}
