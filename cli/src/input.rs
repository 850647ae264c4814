//! Reading `--from` files and directories into [`Document`]s: the shell around the parsers.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::migrate::Document;
use crate::{Error, Result};

/// Reads every path: a file as it is, a directory as each of its `*.yaml`, `*.yml` and `*.json`
/// files (not recursing), sorted by name.
pub fn read_paths(paths: &[PathBuf]) -> Result<Vec<Document>> {
    let mut docs = Vec::new();
    for path in paths {
        let read_err = |source| Error::Read {
            path: path.display().to_string(),
            source,
        };
        if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(read_err)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && input_extension(p).is_some())
                .collect();
            files.sort();
            for file in files {
                docs.extend(read_file(&file)?);
            }
        } else {
            docs.extend(read_file(path)?);
        }
    }
    Ok(docs)
}

fn input_extension(path: &Path) -> Option<&'static str> {
    match path.extension()?.to_str()? {
        "yaml" | "yml" => Some("YAML"),
        "json" => Some("JSON"),
        _ => None,
    }
}

fn read_file(path: &Path) -> Result<Vec<Document>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse(
        &path.display().to_string(),
        &text,
        input_extension(path) == Some("JSON"),
    )
}

/// Parses one file's text: a stream of JSON values when `json`, else multi-document YAML.
/// Documents are named `NAME#N`, counting from 1; empty YAML documents are left out.
pub fn parse(name: &str, text: &str, json: bool) -> Result<Vec<Document>> {
    let mut docs = Vec::new();
    let doc_name = |i: usize| format!("{name}#{}", i + 1);
    if json {
        for (i, value) in serde_json::Deserializer::from_str(text)
            .into_iter::<Value>()
            .enumerate()
        {
            let value = value.map_err(|e| Error::Parse {
                source_name: doc_name(i),
                format: "JSON",
                message: e.to_string(),
            })?;
            docs.push(Document {
                source: doc_name(i),
                value,
            });
        }
    } else {
        for (i, de) in serde_norway::Deserializer::from_str(text).enumerate() {
            let value = Value::deserialize(de).map_err(|e| Error::Parse {
                source_name: doc_name(i),
                format: "YAML",
                message: e.to_string(),
            })?;
            if !value.is_null() {
                docs.push(Document {
                    source: doc_name(i),
                    value,
                });
            }
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_document_yaml_file_becomes_one_document_each_named_by_position() {
        let docs = parse("f.yaml", "a: 1\n---\n---\nb: 2\n", false).unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].source, "f.yaml#1");
        assert_eq!(docs[1].source, "f.yaml#3");
        assert_eq!(docs[1].value["b"], 2);
    }

    #[test]
    fn a_json_file_may_hold_several_values() {
        let docs = parse("f.json", "{\"a\": 1} {\"b\": 2}", true).unwrap();
        assert_eq!(docs.len(), 2);
    }

    #[test]
    fn invalid_yaml_is_an_error_naming_the_document() {
        let err = parse("f.yaml", "a: 1\n---\nb: [\n", false).unwrap_err();
        assert!(err.to_string().contains("f.yaml#2"), "{err}");
    }
}
