//! `loadtest api-listing`: the library's public API as sorted text lines, read
//! from rustdoc's JSON (`scripts/public-api.sh` makes it and compares the listing
//! with the committed `docs/reference/public-api.txt`).
//!
//! Each line is one thing a user's crate can name: an item at every path it can
//! be imported from (a `pub use` lists its item again under the new path, so a
//! type moved with its old path re-exported keeps its old lines), a struct's
//! public fields, an enum's variants, a trait's items, the methods and associated
//! constants of inherent impls, the traits a type implements, and whether a type
//! is `#[non_exhaustive]`. Types in signatures are named by their last segment:
//! a move does not change them, a change of type does.

use std::collections::{BTreeSet, HashSet};

use anyhow::{bail, Context, Result};
use serde_json::Value;

/// Modules listed: the ones the docs show users. `store`, `sql`, `api` and
/// `drain_loop` are public for the workspace's own tests and harness, and hidden
/// from the docs (`#[doc(hidden)]`, which rustdoc's JSON leaves out).
pub fn listing(json: &str) -> Result<Vec<String>> {
    let doc: Value = serde_json::from_str(json).context("rustdoc JSON")?;
    let index = doc
        .get("index")
        .and_then(Value::as_object)
        .context("rustdoc JSON without an index")?;
    let root = doc.get("root").context("rustdoc JSON without a root")?;
    let crate_name = item(index, root)
        .and_then(|i| i.get("name"))
        .and_then(Value::as_str)
        .context("the root module has no name")?
        .to_string();
    let mut lister = Lister {
        index,
        lines: BTreeSet::new(),
        seen: HashSet::new(),
    };
    lister.module(root, &crate_name)?;
    Ok(lister.lines.into_iter().collect())
}

struct Lister<'a> {
    index: &'a serde_json::Map<String, Value>,
    lines: BTreeSet<String>,
    /// (item id, path): re-exports may cycle (`pub use self::…`).
    seen: HashSet<(String, String)>,
}

fn item<'a>(index: &'a serde_json::Map<String, Value>, id: &Value) -> Option<&'a Value> {
    let key = match id {
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        _ => return None,
    };
    index.get(&key)
}

fn inner<'a>(it: &'a Value, kind: &str) -> Option<&'a Value> {
    it.get("inner").and_then(|i| i.get(kind))
}

fn is_public(it: &Value) -> bool {
    it.get("visibility").and_then(Value::as_str) == Some("public")
}

fn ids(v: Option<&Value>) -> Vec<Value> {
    v.and_then(Value::as_array).cloned().unwrap_or_default()
}

impl Lister<'_> {
    fn module(&mut self, id: &Value, path: &str) -> Result<()> {
        let Some(it) = item(self.index, id) else {
            return Ok(());
        };
        let Some(module) = inner(it, "module") else {
            bail!("{path} is not a module");
        };
        for child in ids(module.get("items")) {
            let Some(c) = item(self.index, &child) else {
                continue;
            };
            if !is_public(c) {
                continue;
            }
            if let Some(u) = inner(c, "use") {
                self.re_export(u, path)?;
                continue;
            }
            let Some(name) = c.get("name").and_then(Value::as_str) else {
                continue;
            };
            self.item(&child, &format!("{path}::{name}"))?;
        }
        Ok(())
    }

    /// A `pub use`: the item again under this path (a glob: the module's items).
    fn re_export(&mut self, u: &Value, path: &str) -> Result<()> {
        let name = u.get("name").and_then(Value::as_str).unwrap_or("");
        let source = u.get("source").and_then(Value::as_str).unwrap_or("");
        let target = u.get("id").filter(|v| !v.is_null());
        let glob = u.get("is_glob").and_then(Value::as_bool).unwrap_or(false);
        match target.and_then(|t| item(self.index, t).map(|it| (t, it))) {
            Some((t, it)) if glob && inner(it, "module").is_some() => self.module(t, path),
            Some((t, _)) => self.item(t, &format!("{path}::{name}")),
            // An item of another crate: named by its source path.
            None => {
                self.lines
                    .insert(format!("pub use {path}::{name} = {source}"));
                Ok(())
            }
        }
    }

    fn item(&mut self, id: &Value, path: &str) -> Result<()> {
        if !self.seen.insert((id.to_string(), path.to_string())) {
            return Ok(());
        }
        let Some(it) = item(self.index, id) else {
            return Ok(());
        };
        let Some((kind, body)) = it
            .get("inner")
            .and_then(Value::as_object)
            .and_then(|o| o.iter().next())
        else {
            return Ok(());
        };
        let attrs = non_exhaustive(it);
        match kind.as_str() {
            "module" => {
                self.lines.insert(format!("pub mod {path}"));
                self.module(id, path)?;
            }
            "struct" => {
                self.lines
                    .insert(format!("{attrs}pub struct {path}{}", generics(body)));
                let fields = body.pointer("/kind/plain/fields");
                for f in ids(fields) {
                    if let Some(field) = item(self.index, &f).filter(|f| is_public(f)) {
                        let name = field.get("name").and_then(Value::as_str).unwrap_or("?");
                        let ty = inner(field, "struct_field").map(ty).unwrap_or_default();
                        self.lines.insert(format!("pub {path}.{name}: {ty}"));
                    }
                }
                for f in ids(body.pointer("/kind/tuple")) {
                    if let Some(field) = item(self.index, &f).filter(|f| is_public(f)) {
                        let name = field.get("name").and_then(Value::as_str).unwrap_or("?");
                        let ty = inner(field, "struct_field").map(ty).unwrap_or_default();
                        self.lines.insert(format!("pub {path}.{name}: {ty}"));
                    }
                }
                self.impls(body, path);
            }
            "enum" => {
                self.lines
                    .insert(format!("{attrs}pub enum {path}{}", generics(body)));
                for v in ids(body.get("variants")) {
                    if let Some(variant) = item(self.index, &v) {
                        let name = variant.get("name").and_then(Value::as_str).unwrap_or("?");
                        let shape = inner(variant, "variant")
                            .map(|v| self.variant_shape(v))
                            .unwrap_or_default();
                        self.lines
                            .insert(format!("{}{path}::{name}{shape}", non_exhaustive(variant)));
                    }
                }
                self.impls(body, path);
            }
            "function" => {
                self.lines.insert(format!("pub {}", function(path, body)));
            }
            "trait" => {
                self.lines
                    .insert(format!("pub trait {path}{}", generics(body)));
                for t in ids(body.get("items")) {
                    if let Some(ti) = item(self.index, &t) {
                        self.member(ti, path, "trait item ");
                    }
                }
            }
            "constant" => {
                let t = body.get("type").map(ty).unwrap_or_default();
                self.lines.insert(format!("pub const {path}: {t}"));
            }
            "static" => {
                let t = body.get("type").map(ty).unwrap_or_default();
                self.lines.insert(format!("pub static {path}: {t}"));
            }
            "type_alias" => {
                let t = body.get("type").map(ty).unwrap_or_default();
                self.lines.insert(format!("pub type {path} = {t}"));
            }
            "macro" => {
                self.lines.insert(format!("pub macro {path}!"));
            }
            other => {
                self.lines.insert(format!("pub {other} {path}"));
            }
        }
        Ok(())
    }

    fn variant_shape(&self, v: &Value) -> String {
        let kind = v.get("kind");
        let field_types = |list: Option<&Value>| -> Vec<String> {
            ids(list)
                .iter()
                .filter_map(|f| item(self.index, f))
                .map(|f| {
                    let t = inner(f, "struct_field").map(ty).unwrap_or_default();
                    match f.get("name").and_then(Value::as_str) {
                        Some(n) if !n.chars().all(|c| c.is_ascii_digit()) => format!("{n}: {t}"),
                        _ => t,
                    }
                })
                .collect()
        };
        if let Some(tuple) = kind.and_then(|k| k.get("tuple")) {
            format!("({})", field_types(Some(tuple)).join(", "))
        } else if let Some(s) = kind.and_then(|k| k.get("struct")) {
            format!(" {{ {} }}", field_types(s.get("fields")).join(", "))
        } else {
            String::new()
        }
    }

    /// Inherent impls' public members, and the traits implemented (no blanket or
    /// auto-trait impls: those follow from the others).
    fn impls(&mut self, body: &Value, path: &str) {
        for i in ids(body.get("impls")) {
            let Some(imp) = item(self.index, &i).and_then(|it| inner(it, "impl")) else {
                continue;
            };
            if imp.get("is_synthetic").and_then(Value::as_bool) == Some(true)
                || !imp.get("blanket_impl").is_none_or(Value::is_null)
            {
                continue;
            }
            match imp.get("trait").filter(|t| !t.is_null()) {
                Some(t) => {
                    let name = path_name(t);
                    self.lines.insert(format!("impl {name} for {path}"));
                }
                None => {
                    for m in ids(imp.get("items")) {
                        if let Some(mi) = item(self.index, &m).filter(|m| is_public(m)) {
                            self.member(mi, path, "");
                        }
                    }
                }
            }
        }
    }

    fn member(&mut self, it: &Value, path: &str, prefix: &str) {
        let name = it.get("name").and_then(Value::as_str).unwrap_or("?");
        let full = format!("{path}::{name}");
        let line = if let Some(f) = inner(it, "function") {
            function(&full, f)
        } else if let Some(c) = inner(it, "assoc_const") {
            format!(
                "const {full}: {}",
                c.get("type").map(ty).unwrap_or_default()
            )
        } else if inner(it, "assoc_type").is_some() {
            format!("type {full}")
        } else {
            format!("item {full}")
        };
        self.lines.insert(format!("{prefix}pub {line}"));
    }
}

fn non_exhaustive(it: &Value) -> &'static str {
    let attrs = it.get("attrs").map(Value::to_string).unwrap_or_default();
    if attrs.contains("non_exhaustive") {
        "#[non_exhaustive] "
    } else {
        ""
    }
}

fn function(path: &str, f: &Value) -> String {
    let header = f.get("header");
    let flag = |k: &str| header.and_then(|h| h.get(k)).and_then(Value::as_bool) == Some(true);
    let mut out = String::new();
    if flag("is_const") {
        out.push_str("const ");
    }
    if flag("is_async") {
        out.push_str("async ");
    }
    if flag("is_unsafe") {
        out.push_str("unsafe ");
    }
    let inputs: Vec<String> = f
        .pointer("/sig/inputs")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|pair| {
                    let name = pair.get(0).and_then(Value::as_str).unwrap_or("_");
                    let t = pair.get(1).map(ty).unwrap_or_default();
                    if name == "self" {
                        match t.as_str() {
                            "Self" => "self".to_string(),
                            "&Self" => "&self".to_string(),
                            "&mut Self" => "&mut self".to_string(),
                            _ => format!("self: {t}"),
                        }
                    } else {
                        format!("{name}: {t}")
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let output = match f.pointer("/sig/output") {
        Some(o) if !o.is_null() => format!(" -> {}", ty(o)),
        _ => String::new(),
    };
    out.push_str(&format!(
        "fn {path}{}({}){output}",
        generics(f),
        inputs.join(", ")
    ));
    out
}

/// `<T: Bound, …>` of an item's generics (lifetimes and bounds included).
fn generics(body: &Value) -> String {
    let params: Vec<String> = body
        .pointer("/generics/params")
        .and_then(Value::as_array)
        .map(|ps| {
            ps.iter()
                .filter(|p| {
                    // `impl Trait` arguments appear as synthetic type parameters.
                    p.pointer("/kind/type/is_synthetic")
                        .and_then(Value::as_bool)
                        != Some(true)
                })
                .map(|p| {
                    let name = p.get("name").and_then(Value::as_str).unwrap_or("?");
                    let bounds = p
                        .pointer("/kind/type/bounds")
                        .and_then(Value::as_array)
                        .map(|b| b.iter().map(bound).collect::<Vec<_>>().join(" + "))
                        .unwrap_or_default();
                    if bounds.is_empty() {
                        name.to_string()
                    } else {
                        format!("{name}: {bounds}")
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    if params.is_empty() {
        String::new()
    } else {
        format!("<{}>", params.join(", "))
    }
}

fn bound(b: &Value) -> String {
    if let Some(t) = b.get("trait_bound") {
        t.get("trait").map(path_name).unwrap_or_default()
    } else if let Some(l) = b.get("outlives").and_then(Value::as_str) {
        l.to_string()
    } else {
        "?".into()
    }
}

/// A path's last segment with its generic arguments.
fn path_name(p: &Value) -> String {
    let full = p.get("path").and_then(Value::as_str).unwrap_or("?");
    let last = full.rsplit("::").next().unwrap_or(full);
    format!("{last}{}", args(p.get("args")))
}

fn args(a: Option<&Value>) -> String {
    let Some(a) = a.filter(|a| !a.is_null()) else {
        return String::new();
    };
    if let Some(ab) = a.get("angle_bracketed") {
        let mut parts: Vec<String> = ab
            .get("args")
            .and_then(Value::as_array)
            .map(|xs| {
                xs.iter()
                    .map(|x| {
                        if let Some(t) = x.get("type") {
                            ty(t)
                        } else if let Some(l) = x.get("lifetime").and_then(Value::as_str) {
                            l.to_string()
                        } else if let Some(c) = x.get("const") {
                            c.get("expr")
                                .and_then(Value::as_str)
                                .unwrap_or("_")
                                .to_string()
                        } else {
                            "_".into()
                        }
                    })
                    .collect()
            })
            .unwrap_or_default();
        for c in ab
            .get("constraints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
            let value = c
                .pointer("/binding/equality/type")
                .map(ty)
                .unwrap_or_else(|| "_".into());
            parts.push(format!("{name} = {value}"));
        }
        if parts.is_empty() {
            String::new()
        } else {
            format!("<{}>", parts.join(", "))
        }
    } else if let Some(p) = a.get("parenthesized") {
        let inputs: Vec<String> = p
            .get("inputs")
            .and_then(Value::as_array)
            .map(|xs| xs.iter().map(ty).collect())
            .unwrap_or_default();
        let output = match p.get("output") {
            Some(o) if !o.is_null() => format!(" -> {}", ty(o)),
            _ => String::new(),
        };
        format!("({}){output}", inputs.join(", "))
    } else {
        String::new()
    }
}

/// A type as written, its paths by their last segment.
fn ty(t: &Value) -> String {
    let Some((kind, v)) = t.as_object().and_then(|o| o.iter().next()) else {
        return t.as_str().unwrap_or("?").to_string();
    };
    match kind.as_str() {
        "resolved_path" => path_name(v),
        "generic" | "primitive" => v.as_str().unwrap_or("?").to_string(),
        "borrowed_ref" => {
            let lifetime = v
                .get("lifetime")
                .and_then(Value::as_str)
                .map(|l| format!("{l} "))
                .unwrap_or_default();
            let m = if v.get("is_mutable").and_then(Value::as_bool) == Some(true) {
                "mut "
            } else {
                ""
            };
            format!(
                "&{lifetime}{m}{}",
                v.get("type").map(ty).unwrap_or_default()
            )
        }
        "raw_pointer" => {
            let m = if v.get("is_mutable").and_then(Value::as_bool) == Some(true) {
                "mut"
            } else {
                "const"
            };
            format!("*{m} {}", v.get("type").map(ty).unwrap_or_default())
        }
        "tuple" => {
            let parts: Vec<String> = v
                .as_array()
                .map(|a| a.iter().map(ty).collect())
                .unwrap_or_default();
            format!("({})", parts.join(", "))
        }
        "slice" => format!("[{}]", ty(v)),
        "array" => format!(
            "[{}; {}]",
            v.get("type").map(ty).unwrap_or_default(),
            v.get("len").and_then(Value::as_str).unwrap_or("_")
        ),
        "impl_trait" => {
            let bounds: Vec<String> = v
                .as_array()
                .map(|a| a.iter().map(bound).collect())
                .unwrap_or_default();
            format!("impl {}", bounds.join(" + "))
        }
        "dyn_trait" => {
            let traits: Vec<String> = v
                .get("traits")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|p| p.get("trait").map(path_name).unwrap_or_default())
                        .collect()
                })
                .unwrap_or_default();
            format!("dyn {}", traits.join(" + "))
        }
        "qualified_path" => {
            let on = v.get("self_type").map(ty).unwrap_or_default();
            let name = v.get("name").and_then(Value::as_str).unwrap_or("?");
            match v.get("trait").filter(|t| !t.is_null()) {
                Some(t) => format!("<{on} as {}>::{name}", path_name(t)),
                None => format!("{on}::{name}"),
            }
        }
        "function_pointer" => {
            let inputs: Vec<String> = v
                .pointer("/sig/inputs")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|p| p.get(1)).map(ty).collect())
                .unwrap_or_default();
            let output = match v.pointer("/sig/output") {
                Some(o) if !o.is_null() => format!(" -> {}", ty(o)),
                _ => String::new(),
            };
            format!("fn({}){output}", inputs.join(", "))
        }
        "infer" => "_".into(),
        other => format!("<{other}>"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A miniature of rustdoc's JSON: a module with a struct re-exported under a
    /// second path, one public and one private field, and an inherent method.
    const SAMPLE: &str = r#"{
      "root": 0,
      "index": {
        "0": {"name": "demo", "visibility": "public", "inner": {"module": {"items": [1, 5, 6]}}},
        "1": {"name": "model", "visibility": "public", "inner": {"module": {"items": [2]}}},
        "2": {"name": "Item", "visibility": "public", "attrs": ["non_exhaustive"],
              "inner": {"struct": {"kind": {"plain": {"fields": [3, 4]}}, "generics": {"params": []}, "impls": [7]}}},
        "3": {"name": "id", "visibility": "public", "inner": {"struct_field": {"primitive": "i64"}}},
        "4": {"name": "secret", "visibility": "default", "inner": {"struct_field": {"primitive": "i64"}}},
        "5": {"name": null, "visibility": "public", "inner": {"use": {"source": "model::Item", "name": "Item", "id": 2, "is_glob": false}}},
        "6": {"name": "hidden", "visibility": "crate", "inner": {"module": {"items": []}}},
        "7": {"name": null, "visibility": "default", "inner": {"impl": {"trait": null, "is_synthetic": false, "blanket_impl": null, "items": [8]}}},
        "8": {"name": "new", "visibility": "public", "inner": {"function": {
              "sig": {"inputs": [["id", {"primitive": "i64"}]], "output": {"generic": "Self"}},
              "generics": {"params": []}, "header": {"is_const": false, "is_async": false, "is_unsafe": false}}}}
      }
    }"#;

    #[test]
    fn an_item_is_listed_at_each_path_it_can_be_named_by_with_its_public_parts() {
        let lines = listing(SAMPLE).unwrap();
        assert_eq!(
            lines,
            vec![
                "#[non_exhaustive] pub struct demo::Item",
                "#[non_exhaustive] pub struct demo::model::Item",
                "pub demo::Item.id: i64",
                "pub demo::model::Item.id: i64",
                "pub fn demo::Item::new(id: i64) -> Self",
                "pub fn demo::model::Item::new(id: i64) -> Self",
                "pub mod demo::model",
            ]
        );
    }

    #[test]
    fn json_that_is_not_rustdoc_s_is_an_error() {
        assert!(listing("{}").is_err());
        assert!(listing("not json").is_err());
    }
}
