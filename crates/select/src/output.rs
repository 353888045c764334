//! The answer's records as S3 Select writes them: CSV with the request's delimiters and
//! quoting (a NULL is an empty field), or JSON objects, one per record.

use crate::{Error, Value};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsvOutput {
    pub field: String,
    pub record: String,
    pub quote: char,
    pub escape: char,
    /// Quote every field, not only those that need it.
    pub always: bool,
}

impl Default for CsvOutput {
    fn default() -> Self {
        CsvOutput {
            field: ",".into(),
            record: "\n".into(),
            quote: '"',
            escape: '"',
            always: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    Csv(CsvOutput),
    /// JSON objects, each followed by `record`.
    Json {
        record: String,
    },
}

impl Output {
    pub(crate) fn check(&self) -> Result<(), Error> {
        let (field, record) = match self {
            Output::Csv(csv) => (csv.field.as_str(), csv.record.as_str()),
            Output::Json { record } => ("", record.as_str()),
        };
        if record.is_empty() || record.chars().count() > 2 || field.chars().count() > 2 {
            return Err(Error::Options(
                "an output delimiter is one or two characters".into(),
            ));
        }
        Ok(())
    }

    /// Appends one record of `columns` to `out`.
    pub(crate) fn record(&self, columns: &[(String, Value)], out: &mut Vec<u8>) {
        match self {
            Output::Csv(csv) => {
                for (i, (_, value)) in columns.iter().enumerate() {
                    if i > 0 {
                        out.extend_from_slice(csv.field.as_bytes());
                    }
                    csv.field_text(value, out);
                }
                out.extend_from_slice(csv.record.as_bytes());
            }
            // Written in the projection's order, each name as given (a map would sort them
            // and fold equal names into one).
            Output::Json { record } => {
                out.push(b'{');
                for (i, (name, value)) in columns.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(
                        serde_json::Value::from(name.as_str())
                            .to_string()
                            .as_bytes(),
                    );
                    out.push(b':');
                    out.extend_from_slice(value.json().to_string().as_bytes());
                }
                out.push(b'}');
                out.extend_from_slice(record.as_bytes());
            }
        }
    }
}

impl CsvOutput {
    fn field_text(&self, value: &Value, out: &mut Vec<u8>) {
        if value.is_null() {
            return;
        }
        let text = value.text();
        let needs = self.always
            || text.contains(self.quote)
            || text.contains(self.field.as_str())
            || text.contains(self.record.as_str())
            || text.contains(['\n', '\r']);
        if !needs {
            out.extend_from_slice(text.as_bytes());
            return;
        }
        let mut quoted = String::with_capacity(text.len() + 2);
        quoted.push(self.quote);
        for c in text.chars() {
            if c == self.quote || (c == self.escape && self.escape != self.quote) {
                quoted.push(self.escape);
            }
            quoted.push(c);
        }
        quoted.push(self.quote);
        out.extend_from_slice(quoted.as_bytes());
    }
}
