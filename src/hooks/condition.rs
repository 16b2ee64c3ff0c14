//! successCondition and failureCondition: CEL expressions (the `cel` crate, MIT) over `result`,
//! with seed 004's helpers `asInt`, `asFloat`, `isNaN` and `len`, comparisons, `&&`, `||`, `!`
//! and indexing (`result[0]` for a Prometheus vector). Compiled once, when the template is
//! checked; evaluated per measurement.

use cel::{Context, ExecutionError, FunctionContext, Program, Value};
use std::sync::Arc;

pub struct Condition {
    source: String,
    program: Program,
}

impl std::fmt::Debug for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Condition({:?})", self.source)
    }
}

impl Condition {
    /// Compiles `source`; the error says where it does not parse.
    pub fn parse(source: &str) -> Result<Condition, String> {
        let program = Program::compile(source).map_err(|e| format!("{source:?} does not parse: {e}"))?;
        Ok(Condition { source: source.to_string(), program })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// True or false for `result`; an error (a type that does not fit, an index out of range,
    /// an expression that is not a boolean) names the expression.
    pub fn eval(&self, result: &serde_json::Value) -> Result<bool, String> {
        let mut ctx = Context::default();
        ctx.add_variable_from_value("result", from_json(result));
        ctx.add_function("asInt", as_int);
        ctx.add_function("asFloat", as_float);
        ctx.add_function("isNaN", is_nan);
        ctx.add_function("len", len);
        match self.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("{:?} gave {other:?}, not true or false", self.source)),
            Err(e) => Err(format!("{:?}: {e}", self.source)),
        }
    }
}

/// A JSON value as CEL sees it: numbers that are whole stay integers.
pub fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(f)) => Value::Float(f),
            _ => Value::Null,
        },
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(items) => Value::List(Arc::new(items.iter().map(from_json).collect())),
        serde_json::Value::Object(map) => {
            let map: std::collections::HashMap<String, Value> =
                map.iter().map(|(k, v)| (k.clone(), from_json(v))).collect();
            Value::Map(map.into())
        }
    }
}

fn as_int(ftx: &FunctionContext, v: Value) -> Result<Value, ExecutionError> {
    match v {
        Value::Int(i) => Ok(Value::Int(i)),
        Value::UInt(u) => i64::try_from(u).map(Value::Int).map_err(|_| ftx.error("integer overflow")),
        Value::Float(f) if f.fract() == 0.0 && f.is_finite() => Ok(Value::Int(f as i64)),
        Value::String(s) => {
            s.trim().parse::<i64>().map(Value::Int).map_err(|_| ftx.error(format!("{s:?} is not an integer")))
        }
        other => Err(ftx.error(format!("{other:?} is not an integer"))),
    }
}

fn as_float(ftx: &FunctionContext, v: Value) -> Result<Value, ExecutionError> {
    match v {
        Value::Float(f) => Ok(Value::Float(f)),
        Value::Int(i) => Ok(Value::Float(i as f64)),
        Value::UInt(u) => Ok(Value::Float(u as f64)),
        Value::String(s) => {
            s.trim().parse::<f64>().map(Value::Float).map_err(|_| ftx.error(format!("{s:?} is not a number")))
        }
        other => Err(ftx.error(format!("{other:?} is not a number"))),
    }
}

fn is_nan(ftx: &FunctionContext, v: Value) -> Result<Value, ExecutionError> {
    match v {
        Value::Float(f) => Ok(Value::Bool(f.is_nan())),
        Value::Int(_) | Value::UInt(_) => Ok(Value::Bool(false)),
        Value::String(s) => Ok(Value::Bool(s.trim().parse::<f64>().is_ok_and(f64::is_nan))),
        other => Err(ftx.error(format!("{other:?} is not a number"))),
    }
}

fn len(ftx: &FunctionContext, v: Value) -> Result<Value, ExecutionError> {
    let n = match v {
        Value::List(l) => l.len(),
        Value::Map(m) => m.map.len(),
        Value::String(s) => s.chars().count(),
        other => return Err(ftx.error(format!("{other:?} has no length"))),
    };
    Ok(Value::Int(n as i64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn holds(expr: &str, result: serde_json::Value) -> Result<bool, String> {
        Condition::parse(expr).unwrap().eval(&result)
    }

    #[test]
    fn the_seeds_example_and_the_helpers() {
        assert_eq!(holds("asInt(result) < 30", json!("32")), Ok(false));
        assert_eq!(holds("asInt(result) < 30", json!(20)), Ok(true));
        assert_eq!(holds("asFloat(result) >= 0.5 && !isNaN(asFloat(result))", json!("0.75")), Ok(true));
        assert_eq!(holds("isNaN(asFloat(result))", json!("NaN")), Ok(true));
        assert_eq!(holds("len(result) == 2 && result[1] > 3.5", json!([1, 4.5])), Ok(true));
        assert_eq!(holds("result.age > 18 || result.name == 'x'", json!({"age": 20, "name": "y"})), Ok(true));
    }

    #[test]
    fn errors_name_the_expression() {
        let e = holds("asInt(result) < 30", json!("thirty")).unwrap_err();
        assert!(e.contains("asInt(result) < 30") && e.contains("\"thirty\" is not an integer"), "{e}");
        let e = holds("result[3] > 1", json!([1])).unwrap_err();
        assert!(e.contains("result[3] > 1"), "{e}");
        let e = holds("asInt(result)", json!(1)).unwrap_err();
        assert!(e.contains("not true or false"), "{e}");
        assert!(Condition::parse("asInt(result) <").unwrap_err().contains("does not parse"));
    }
}
