//! Using the catalog as a library: build the demo warehouse in a temporary
//! directory, list its root one level deep, then open it as a virtual
//! dataset and print the rolled-up stats.
//!
//! Run: `cargo run --release --example open_warehouse`

use std::path::Path;

use pchronicle::catalog::{Catalog, CatalogOptions, Entry};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("pchronicle-example-{}", std::process::id()));
    pchronicle::demo::build(&dir)?;
    let catalog = Catalog::new(&dir, CatalogOptions::default())?;

    for entry in catalog.list(Path::new("."))?.entries {
        match entry {
            Entry::Directory { name } => println!("{name}/"),
            Entry::Dataset { name, preview } => {
                println!(
                    "{name}  [{}] {:?} records",
                    preview.format, preview.counts.record_count
                )
            }
            Entry::File { name, size, .. } => println!("{name}  ({size} bytes)"),
        }
    }

    let snapshot = catalog.open(Path::new("."))?;
    for source in &snapshot.sources {
        println!("source {} {:?}", source.file, source.path_attrs);
    }
    print!("{}", snapshot.stats().to_json());
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
