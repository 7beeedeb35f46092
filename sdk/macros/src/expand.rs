//! Code generation for `#[track_state]`.

use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{ItemFn, LitStr, ReturnType, Type};

use crate::attr::Args;

/// Rewrites the function so its body runs inside a state scope (sync) or a state span
/// (async).
pub(crate) fn expand(args: Args, item: TokenStream) -> syn::Result<TokenStream> {
    let func: ItemFn = syn::parse2(item).map_err(|e| {
        syn::Error::new(
            e.span(),
            "#[track_state] goes on a function (fn or async fn)",
        )
    })?;
    if let Some(c) = &func.sig.constness {
        return Err(syn::Error::new(
            c.span(),
            "#[track_state] cannot go on a const fn",
        ));
    }
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = func;
    let state = &args.state;
    let operation = args
        .operation
        .unwrap_or_else(|| LitStr::new(&sig.ident.to_string(), sig.ident.span()));
    let state_tokens = quote_spanned! {state.span()=>
        {
            let __hm_state: ::higgsmeter::AppState = #state;
            __hm_state
        }
    };

    let body = if sig.asyncness.is_some() {
        // The output type is pinned up front (so `?` and `return` infer) and the body's
        // value is bound to it (a coercion site, as an `async fn`'s tail is).
        let future = match &sig.output {
            ReturnType::Type(_, ty) if !contains_impl_trait(ty) => quote! {
                ::higgsmeter::__private::with_output::<#ty, _>(async move {
                    let __hm_output: #ty = #block;
                    __hm_output
                })
            },
            ReturnType::Default => quote! {
                ::higgsmeter::__private::with_output::<(), _>(async move #block)
            },
            ReturnType::Type(..) => quote! { async move #block },
        };
        quote! {
            {
                let __hm_span = ::higgsmeter::__private::state_span(#state_tokens, #operation);
                ::higgsmeter::__private::Instrument::instrument(#future, __hm_span).await
            }
        }
    } else {
        quote! {
            {
                let __hm_scope = ::higgsmeter::__private::state_scope(#state_tokens, #operation);
                #block
            }
        }
    };
    Ok(quote! {
        #(#attrs)*
        #vis #sig #body
    })
}

/// Whether a type mentions `impl Trait` anywhere, which cannot be named in a turbofish.
fn contains_impl_trait(ty: &Type) -> bool {
    fn walk(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|t| match t {
            proc_macro2::TokenTree::Ident(i) => i == "impl",
            proc_macro2::TokenTree::Group(g) => walk(g.stream()),
            _ => false,
        })
    }
    walk(quote!(#ty))
}
