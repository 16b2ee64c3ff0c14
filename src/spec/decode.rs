//! A forgiving serde `Deserializer` over a parsed JSON/TOML document.
//!
//! Plain serde stops at the first mistake. Users paste whole BCS files and must see every mistake
//! at once, so this deserializer records a wrong type, an unknown enum value or an unknown field
//! with its path, substitutes a neutral value (0, "", false, empty list, first enum variant) and
//! goes on. The model's structs are all `#[serde(default)]`, so a missing field never aborts
//! either; "required" is checked by validation afterwards. Only a custom type's own visitor can
//! still abort, and that error is reported with its path too.

use super::error::{did_you_mean, Path, SpecError};
use serde::de::{self, DeserializeOwned, IntoDeserializer, Visitor};
use serde_json::Value;
use std::cell::RefCell;
use std::fmt;

/// Decodes `value` into `T`, returning the value and every mistake found on the way.
pub fn decode<T: DeserializeOwned>(value: &Value) -> (Option<T>, Vec<SpecError>) {
    let sink = RefCell::new(Vec::new());
    let de = Lenient { value, path: Path::root(), sink: &sink, known_fields: None };
    let result = T::deserialize(de);
    let mut errors = sink.into_inner();
    match result {
        Ok(v) => (Some(v), errors),
        Err(Fatal { path, message }) => {
            errors.push(SpecError::new(path.unwrap_or_default(), message));
            (None, errors)
        }
    }
}

/// An error a custom visitor raised; it ends decoding.
#[derive(Debug)]
pub struct Fatal {
    path: Option<String>,
    message: String,
}

impl fmt::Display for Fatal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}
impl std::error::Error for Fatal {}
impl de::Error for Fatal {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Fatal { path: None, message: msg.to_string() }
    }
}

fn locate(mut e: Fatal, path: &Path) -> Fatal {
    if e.path.is_none() {
        e.path = Some(path.to_string());
    }
    e
}

/// How a value looks, for "expected X, found Y" messages.
pub fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Array(_) => "a list".into(),
        Value::Object(map) if map.contains_key(TOML_DATETIME) => "a TOML date-time".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// How the toml crate spells a date-time when it becomes a JSON value.
const TOML_DATETIME: &str = "$__toml_private_datetime";

/// The newtype name of [`super::model::NumberText`]: the one leaf that takes a number or a
/// string. Deserializing it through this hook keeps a wrong type a recorded mistake instead of
/// an error that would end decoding.
pub const NUMBER_TEXT: &str = "NumberText";

struct Lenient<'a> {
    value: &'a Value,
    path: Path,
    sink: &'a RefCell<Vec<SpecError>>,
    /// Set when this value sits under a struct's key: the key and the struct's known fields,
    /// to name an unknown key and suggest a spelling.
    known_fields: Option<(&'a str, &'static [&'static str])>,
}

impl<'a> Lenient<'a> {
    fn child(&self, value: &'a Value, path: Path, known_fields: Option<(&'a str, &'static [&'static str])>) -> Self {
        Lenient { value, path, sink: self.sink, known_fields }
    }
    fn mistake(&self, message: String) {
        self.sink.borrow_mut().push(SpecError::new(self.path.to_string(), message));
    }
    fn wrong_type(&self, expected: &str) {
        self.mistake(format!("expected {expected}, found {}", describe(self.value)));
    }
    /// An integer in `min..=max`, accepting integral floats such as `5.0`.
    fn integer(&self, min: i128, max: i128) -> Option<i128> {
        let n = match self.value {
            Value::Number(n) => n
                .as_i64()
                .map(i128::from)
                .or_else(|| n.as_u64().map(i128::from))
                .or_else(|| n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 1e30).map(|f| f as i128)),
            _ => None,
        };
        let expected = if min == 0 && max >= i128::from(u32::MAX) {
            "a non-negative integer".to_string()
        } else if min == i128::from(i64::MIN) {
            "an integer".to_string()
        } else {
            format!("an integer from {min} to {max}")
        };
        match n {
            Some(n) if n >= min && n <= max => Some(n),
            _ => {
                self.wrong_type(&expected);
                None
            }
        }
    }
}

macro_rules! integer_methods {
    ($($method:ident $ty:ty => $visit:ident,)*) => {$(
        fn $method<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
            let n = self.integer(i128::from(<$ty>::MIN), i128::from(<$ty>::MAX)).unwrap_or(0);
            visitor.$visit(n as $ty).map_err(|e| locate(e, &self.path))
        }
    )*};
}

impl<'a> de::Deserializer<'a> for Lenient<'a> {
    type Error = Fatal;

    fn deserialize_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        let path = self.path.clone();
        let r = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    visitor.visit_u64(u)
                } else if let Some(i) = n.as_i64() {
                    visitor.visit_i64(i)
                } else {
                    visitor.visit_f64(n.as_f64().unwrap_or(0.0))
                }
            }
            Value::String(s) => visitor.visit_str(s),
            Value::Array(items) => visitor.visit_seq(Seq::new(self, items)),
            Value::Object(map) => visitor.visit_map(Map::new(self, map, None)),
        };
        r.map_err(|e| locate(e, &path))
    }

    fn deserialize_bool<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        let b = match self.value {
            Value::Bool(b) => *b,
            _ => {
                self.wrong_type("true or false");
                false
            }
        };
        visitor.visit_bool(b)
    }

    integer_methods! {
        deserialize_i8 i8 => visit_i8,
        deserialize_i16 i16 => visit_i16,
        deserialize_i32 i32 => visit_i32,
        deserialize_i64 i64 => visit_i64,
        deserialize_u8 u8 => visit_u8,
        deserialize_u16 u16 => visit_u16,
        deserialize_u32 u32 => visit_u32,
        deserialize_u64 u64 => visit_u64,
    }

    fn deserialize_f32<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_f64(visitor)
    }

    fn deserialize_f64<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        let f = match self.value {
            Value::Number(n) => n.as_f64().unwrap_or(0.0),
            _ => {
                self.wrong_type("a number");
                0.0
            }
        };
        visitor.visit_f64(f)
    }

    fn deserialize_char<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_str(visitor)
    }

    fn deserialize_str<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        let path = self.path.clone();
        match self.value {
            Value::String(s) => visitor.visit_str(s),
            _ => {
                self.wrong_type("a string");
                visitor.visit_str("")
            }
        }
        .map_err(|e| locate(e, &path))
    }

    fn deserialize_string<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_str(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_str(visitor)
    }

    fn deserialize_option<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        match self.value {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        if !self.value.is_null() {
            self.wrong_type("null");
        }
        visitor.visit_unit()
    }

    fn deserialize_unit_struct<V: Visitor<'a>>(self, _name: &'static str, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'a>>(self, name: &'static str, visitor: V) -> Result<V::Value, Fatal> {
        if name != NUMBER_TEXT {
            return visitor.visit_newtype_struct(self);
        }
        let text = match self.value {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => {
                self.wrong_type("a number or a string holding a number");
                String::new()
            }
        };
        let path = self.path.clone();
        let inner: de::value::StringDeserializer<Fatal> = text.into_deserializer();
        visitor.visit_newtype_struct(inner).map_err(|e| locate(e, &path))
    }

    fn deserialize_seq<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        let path = self.path.clone();
        let items: &'a [Value] = match self.value {
            Value::Array(items) => items,
            _ => {
                self.wrong_type("a list");
                &[]
            }
        };
        visitor.visit_seq(Seq::new(self, items)).map_err(|e| locate(e, &path))
    }

    fn deserialize_tuple<V: Visitor<'a>>(self, _len: usize, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Fatal> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        self.object(visitor, None, "an object")
    }

    fn deserialize_struct<V: Visitor<'a>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fatal> {
        self.object(visitor, Some(fields), "an object")
    }

    fn deserialize_enum<V: Visitor<'a>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Fatal> {
        let Some(&fallback) = variants.first() else {
            return Err(locate(de::Error::custom("enum without variants"), &self.path));
        };
        let chosen = match self.value {
            Value::String(s) => {
                // Exact spelling first; then any letter case (real files write `ClUSTER`).
                let found =
                    variants.iter().find(|v| **v == s).or_else(|| variants.iter().find(|v| v.eq_ignore_ascii_case(s)));
                match found {
                    Some(v) => v,
                    None => {
                        let hint = did_you_mean(s, variants.iter().copied())
                            .map(|v| format!(" (did you mean `{v}`?)"))
                            .unwrap_or_default();
                        self.mistake(format!("must be one of {}, found {s:?}{hint}", variants.join(", ")));
                        fallback
                    }
                }
            }
            _ => {
                self.wrong_type(&format!("one of {}", variants.join(", ")));
                fallback
            }
        };
        let path = self.path.clone();
        visitor.visit_enum(IntoDeserializer::<Fatal>::into_deserializer(chosen)).map_err(|e| locate(e, &path))
    }

    fn deserialize_identifier<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        self.deserialize_str(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'a>>(self, visitor: V) -> Result<V::Value, Fatal> {
        // Serde asks to ignore a value only for a key the struct does not know.
        if let Some((key, fields)) = self.known_fields {
            let hint = match did_you_mean(key, fields.iter().copied()) {
                Some(f) => format!(" (did you mean `{f}`?)"),
                None => format!(" (known fields: {})", fields.join(", ")),
            };
            self.mistake(format!("unknown field `{key}`{hint}"));
        }
        visitor.visit_unit()
    }
}

impl<'a> Lenient<'a> {
    fn object<V: Visitor<'a>>(
        self,
        visitor: V,
        fields: Option<&'static [&'static str]>,
        expected: &str,
    ) -> Result<V::Value, Fatal> {
        static EMPTY: std::sync::OnceLock<serde_json::Map<String, Value>> = std::sync::OnceLock::new();
        let path = self.path.clone();
        let map = match self.value {
            Value::Object(map) => map,
            _ => {
                self.wrong_type(expected);
                EMPTY.get_or_init(serde_json::Map::new)
            }
        };
        visitor.visit_map(Map::new(self, map, fields)).map_err(|e| locate(e, &path))
    }
}

struct Seq<'a> {
    parent: Lenient<'a>,
    items: std::iter::Enumerate<std::slice::Iter<'a, Value>>,
}

impl<'a> Seq<'a> {
    fn new(parent: Lenient<'a>, items: &'a [Value]) -> Self {
        Seq { parent, items: items.iter().enumerate() }
    }
}

impl<'a> de::SeqAccess<'a> for Seq<'a> {
    type Error = Fatal;
    fn next_element_seed<T: de::DeserializeSeed<'a>>(&mut self, seed: T) -> Result<Option<T::Value>, Fatal> {
        match self.items.next() {
            None => Ok(None),
            Some((i, v)) => {
                let path = self.parent.path.index(i);
                let child = self.parent.child(v, path.clone(), None);
                seed.deserialize(child).map(Some).map_err(|e| locate(e, &path))
            }
        }
    }
}

struct Map<'a> {
    parent: Lenient<'a>,
    entries: serde_json::map::Iter<'a>,
    pending: Option<(&'a String, &'a Value)>,
    fields: Option<&'static [&'static str]>,
}

impl<'a> Map<'a> {
    fn new(
        parent: Lenient<'a>,
        map: &'a serde_json::Map<String, Value>,
        fields: Option<&'static [&'static str]>,
    ) -> Self {
        Map { parent, entries: map.iter(), pending: None, fields }
    }
}

impl<'a> de::MapAccess<'a> for Map<'a> {
    type Error = Fatal;
    fn next_key_seed<K: de::DeserializeSeed<'a>>(&mut self, seed: K) -> Result<Option<K::Value>, Fatal> {
        match self.entries.next() {
            None => Ok(None),
            Some((k, v)) => {
                self.pending = Some((k, v));
                let key: de::value::StrDeserializer<'_, Fatal> = k.as_str().into_deserializer();
                seed.deserialize(key).map(Some)
            }
        }
    }
    fn next_value_seed<V: de::DeserializeSeed<'a>>(&mut self, seed: V) -> Result<V::Value, Fatal> {
        let (k, v) = self.pending.take().ok_or_else(|| <Fatal as de::Error>::custom("value asked before key"))?;
        let path = self.parent.path.field(k);
        let child = self.parent.child(v, path.clone(), self.fields.map(|f| (k.as_str(), f)));
        seed.deserialize(child).map_err(|e| locate(e, &path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default, rename_all = "camelCase")]
    struct Inner {
        port: u16,
        mode: Mode,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    enum Mode {
        #[default]
        Always,
        Never,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(default, rename_all = "camelCase")]
    struct Outer {
        name: String,
        items: Vec<Inner>,
        enabled: bool,
    }

    #[test]
    fn reports_every_mistake_with_its_path() {
        let doc = json!({
            "name": 5,
            "items": [{"port": 70000, "mode": "never"}, {"port": "x", "mode": "Never | Always"}],
            "enabled": "yes",
            "stratCmd": "oops"
        });
        let (value, errors) = decode::<Outer>(&doc);
        let msgs: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            msgs,
            vec![
                "name: expected a string, found the number 5",
                "items[0].port: expected an integer from 0 to 65535, found the number 70000",
                "items[1].port: expected an integer from 0 to 65535, found the string \"x\"",
                "items[1].mode: must be one of Always, Never, found \"Never | Always\"",
                "enabled: expected true or false, found the string \"yes\"",
                "stratCmd: unknown field `stratCmd` (known fields: name, items, enabled)",
            ]
        );
        let value = value.unwrap();
        assert_eq!(value.items[0].mode, Mode::Never, "enum letter case is tolerated");
        assert_eq!(value.items.len(), 2);
    }

    #[test]
    fn clean_input_decodes_like_serde() {
        let doc = json!({"name": "a", "items": [{"port": 80, "mode": "Never"}], "enabled": true});
        let (value, errors) = decode::<Outer>(&doc);
        assert!(errors.is_empty());
        let plain: Outer = serde_json::from_value(doc).unwrap();
        assert_eq!(value.unwrap(), plain);
    }

    #[test]
    fn non_object_where_struct_expected() {
        let (value, errors) = decode::<Outer>(&json!([1, 2]));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].message, "expected an object, found a list");
        assert_eq!(value.unwrap(), Outer::default());
    }
}
