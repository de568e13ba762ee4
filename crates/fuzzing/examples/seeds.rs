//! Write the seed inputs of every target to `fuzz/corpus/<target>/seed-<name>`
//! (existing seed files are replaced; other corpus files are left alone).
//!
//! `cargo run --release -p onionmix-fuzzing --example seeds`

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
    let mut n = 0;
    for (target, name, bytes) in onionmix_fuzzing::seeds::all() {
        assert!(
            onionmix_fuzzing::target(target).is_some(),
            "seed for unknown target {target}"
        );
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("seed-{name}")), &bytes)?;
        n += 1;
    }
    println!("wrote {n} seeds under {}", root.display());
    Ok(())
}
