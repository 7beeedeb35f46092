//! Parsing of `#[track_state(STATE, operation = "...")]`.

use syn::parse::{Parse, ParseStream};
use syn::{Expr, Ident, LitStr, Token};

/// The attribute's arguments.
pub(crate) struct Args {
    /// The state expression, e.g. `AppState::Io`.
    pub(crate) state: Expr,
    /// The operation label, when given.
    pub(crate) operation: Option<LitStr>,
}

impl Parse for Args {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        if input.is_empty() {
            return Err(input.error(
                "#[track_state] needs a state, e.g. #[track_state(AppState::Io)] or \
                 #[track_state(AppState::Gpu, operation = \"inference\")]",
            ));
        }
        if input.peek(Ident) && input.peek2(Token![=]) {
            let key: Ident = input.parse()?;
            return Err(syn::Error::new(
                key.span(),
                format!("#[track_state]: the state comes first, before `{key} = ...`"),
            ));
        }
        let state: Expr = input.parse()?;
        let mut operation = None;
        while !input.is_empty() {
            input.parse::<Token![,]>()?;
            if input.is_empty() {
                break;
            }
            let key: Ident = input.parse()?;
            if key != "operation" {
                return Err(syn::Error::new(
                    key.span(),
                    format!(
                        "#[track_state]: unknown argument `{key}`; the only one is `operation = \"...\"`"
                    ),
                ));
            }
            if operation.is_some() {
                return Err(syn::Error::new(
                    key.span(),
                    "#[track_state]: `operation` given twice",
                ));
            }
            input.parse::<Token![=]>()?;
            let value: LitStr = input.parse().map_err(|e| {
                syn::Error::new(
                    e.span(),
                    "#[track_state]: `operation` takes a string literal",
                )
            })?;
            operation = Some(value);
        }
        Ok(Args { state, operation })
    }
}
