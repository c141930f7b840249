//! Turning a rendered template into the model's final prompt text: the chat
//! template from the GGUF (`tokenizer.chat_template`, rendered with minijinja
//! and Python-compatible string methods) for instruct models, or the text
//! itself for completion models. The assistant prefix is appended after the
//! generation prompt, so the model continues it.

use super::PromptError;
use crate::prompt::PromptFormat;
use serde::Serialize;

/// ChatML, used when a chat model's GGUF carries no template but knows
/// `<|im_start|>` (documented equivalent of the usual template).
pub const CHATML_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

#[derive(Debug, Clone, Serialize)]
struct Message<'a> {
    role: &'a str,
    content: &'a str,
}

/// Renders messages for one model.
pub struct ChatFormatter {
    env: minijinja::Environment<'static>,
    format: PromptFormat,
    bos_token: String,
    eos_token: String,
}

impl ChatFormatter {
    /// A formatter for `format`; `template` is the chat template (required for chat).
    pub fn new(
        format: PromptFormat,
        template: Option<&str>,
        bos_token: &str,
        eos_token: &str,
    ) -> Result<Self, PromptError> {
        let mut env = minijinja::Environment::new();
        env.set_keep_trailing_newline(true);
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        minijinja_contrib::add_to_environment(&mut env);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<String, minijinja::Error> {
            Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, msg))
        });
        if format == PromptFormat::Chat {
            let t = template.ok_or_else(|| PromptError::Chat("the model has no chat template".into()))?;
            env.add_template_owned("chat", t.to_string())
                .map_err(|e| PromptError::Chat(format!("the model's chat template does not compile: {e:#}")))?;
        }
        Ok(ChatFormatter { env, format, bos_token: bos_token.to_string(), eos_token: eos_token.to_string() })
    }

    pub fn format(&self) -> PromptFormat {
        self.format
    }

    /// The final prompt text.
    pub fn render(&self, system: Option<&str>, user: &str, assistant_prefix: &str) -> Result<String, PromptError> {
        match self.format {
            PromptFormat::Completion => {
                let mut s = String::new();
                if let Some(sys) = system {
                    s.push_str(sys);
                    s.push_str("\n\n");
                }
                s.push_str(user);
                s.push_str(assistant_prefix);
                Ok(s)
            }
            PromptFormat::Chat => {
                let mut messages = Vec::new();
                if let Some(sys) = system {
                    messages.push(Message { role: "system", content: sys });
                }
                messages.push(Message { role: "user", content: user });
                let tmpl = self.env.get_template("chat").map_err(|e| PromptError::Chat(e.to_string()))?;
                let mut s = tmpl
                    .render(minijinja::context! {
                        messages => messages,
                        add_generation_prompt => true,
                        bos_token => self.bos_token,
                        eos_token => self.eos_token,
                    })
                    .map_err(|e| PromptError::Chat(format!("rendering the chat template: {e:#}")))?;
                s.push_str(assistant_prefix);
                Ok(s)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chatml_renders_with_prefix() {
        let f = ChatFormatter::new(PromptFormat::Chat, Some(CHATML_TEMPLATE), "", "<|im_end|>").unwrap();
        let s = f.render(Some("sys"), "hi", "```python\n").unwrap();
        assert_eq!(
            s,
            "<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n```python\n"
        );
    }

    #[test]
    fn python_string_methods_work() {
        let t = "{% for m in messages %}{{ m['content'].strip() }}|{% endfor %}";
        let f = ChatFormatter::new(PromptFormat::Chat, Some(t), "", "").unwrap();
        assert_eq!(f.render(None, "  x  ", "").unwrap(), "x|");
    }

    #[test]
    fn completion_is_plain_text() {
        let f = ChatFormatter::new(PromptFormat::Completion, None, "", "").unwrap();
        assert_eq!(f.render(None, "# In[1]:\n", "").unwrap(), "# In[1]:\n");
    }

    #[test]
    fn template_exceptions_are_errors() {
        let t = "{{ raise_exception('only user and assistant roles') }}";
        let f = ChatFormatter::new(PromptFormat::Chat, Some(t), "", "").unwrap();
        let e = f.render(Some("s"), "u", "").unwrap_err().to_string();
        assert!(e.contains("only user and assistant roles"), "{e}");
    }
}
